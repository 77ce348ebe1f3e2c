"""MIND, the multi-interest retrieval model: ``config.py`` its section (torch-free), ``capsule.py`` the dynamic
routing, ``model.py`` its ``build``. This package imports nothing."""
