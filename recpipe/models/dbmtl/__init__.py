"""DBMTL: ``config.py`` its section (torch-free), ``model.py`` its ``build`` (MultiTowerDIN's towers under its head). This package imports nothing."""
