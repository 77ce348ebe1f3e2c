"""recpipe: raw tables to a promoted, exported CTR model (MultiTowerDIN, DLRM) on TorchRec."""

__version__ = "0.1.0"
