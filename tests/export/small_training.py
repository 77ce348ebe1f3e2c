"""A few training steps of a small model on generated rows, shared by the export tests' fixtures."""

from __future__ import annotations

import pyarrow as pa
import torch
from torch import nn

from recpipe.batch import to_batch
from recpipe.export.split import model_tables
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec
from recpipe.models import bce_loss


def train_steps(model: nn.Module, spec: FeatureSpec, rows: pa.Table, steps: int) -> nn.Module:
    """``steps`` steps over ``rows`` (split evenly; bad rows skipped): SGD (lr 1) on the tables, Adam on the
    rest. Returns ``model`` in eval mode."""
    tables = {id(w) for w, _ in model_tables(model).values()}
    dense_opt = torch.optim.Adam([p for p in model.parameters() if id(p) not in tables], lr=3e-3)
    sparse_opt = torch.optim.SGD([p for p in model.parameters() if id(p) in tables], lr=1.0)
    features = FeatureGenerator(spec, on_bad_row="skip")(rows)
    step_rows = features.num_rows // steps
    model.train()
    for step in range(steps):
        b = to_batch(features.slice(step * step_rows, (step + 1) * step_rows), spec.sparse_keys())
        loss = bce_loss(model(b.dense, b.sparse), b.labels)
        dense_opt.zero_grad()
        sparse_opt.zero_grad(set_to_none=True)
        loss.backward()
        dense_opt.step()
        sparse_opt.step()
    return model.eval()
