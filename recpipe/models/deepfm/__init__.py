"""DeepFM: ``config.py`` its section (torch-free), ``model.py`` its ``build`` (the module is WideAndDeep's, with an FM term). This package imports nothing."""
