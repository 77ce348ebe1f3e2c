"""Sparse weight decay would be silently ignored by FBGEMM's fused optimizers: it is refused instead."""

import pytest

from recpipe.config import OptimizerConfig
from recpipe.train.optim import check_sparse_optimizer


def test_sparse_weight_decay_is_refused_not_ignored():
    with pytest.raises(ValueError, match=r"sparse_optimizer\.weight_decay 0\.5: not supported"):
        check_sparse_optimizer(OptimizerConfig(type="rowwise_adagrad", lr=0.1, weight_decay=0.5), "cpu")
    check_sparse_optimizer(OptimizerConfig(type="adagrad", lr=0.1), "cpu")
