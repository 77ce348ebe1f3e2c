"""DSSMv2, the two-tower retrieval model with one set of embedding tables for both towers: ``config.py`` its
section (torch-free), ``model.py`` its ``build``. This package imports nothing."""
