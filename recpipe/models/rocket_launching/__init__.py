"""RocketLaunching: ``config.py`` its section (torch-free), ``dense.py`` its dense arch (plain torch, no
torchrec), ``model.py`` the module and ``build``. This package imports nothing."""
