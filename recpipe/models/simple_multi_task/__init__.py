"""SimpleMultiTask: ``config.py`` its section (torch-free), ``model.py`` its ``build`` (MultiTowerDIN's towers under
the task towers alone). This package imports nothing."""
