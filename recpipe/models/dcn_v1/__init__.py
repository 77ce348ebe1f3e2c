"""DCNv1: ``config.py`` its section (torch-free), ``model.py`` its ``build`` (DCNv2's module with DCN's cross
network). This package imports nothing."""
