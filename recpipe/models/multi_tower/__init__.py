"""MultiTower: ``config.py`` its section (torch-free), ``model.py`` its ``build`` (the module is MultiTowerDIN's, with no DIN tower). This package imports nothing."""
