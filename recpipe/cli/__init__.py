"""The ``recpipe`` command line."""
