"""PEPNet: ``config.py`` its section (torch-free), ``dense.py`` its gates and head (plain torch), ``model.py`` its
``build`` (MultiTowerDIN's towers under its head). This package imports nothing."""
