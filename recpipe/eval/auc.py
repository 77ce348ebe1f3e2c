"""Kept only for ``recpipe/train/loop.py``, which still imports ``binary_auc`` from here: the function lives
in :mod:`recpipe.auc` (data, below eval, needs it too). Delete this module when that import moves."""

from recpipe.auc import binary_auc

__all__ = ["binary_auc"]
