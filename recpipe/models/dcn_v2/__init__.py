"""DCNv2: ``config.py`` its section (torch-free), ``dense.py`` its dense arch (plain torch, no torchrec; DCNv1's
too), ``model.py`` the module and ``build``. This package imports nothing."""
