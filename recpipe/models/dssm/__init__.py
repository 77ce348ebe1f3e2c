"""DSSM, the two-tower retrieval model: ``config.py`` its section (torch-free), ``model.py`` its ``build``. This
package imports nothing."""
