"""What the multi-task models share: ``config.py`` the tower and task sections (torch-free), ``model.py`` the
builder. This package imports nothing."""
