"""A few training steps of a small model on generated rows, shared by the export tests' fixtures."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

from recpipe.batch import to_batch
from recpipe.config import RecpipeConfig
from recpipe.data.synthetic import generate
from recpipe.export.parity import clean_rows
from recpipe.export.split import model_tables
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec
from recpipe.models.blocks.domains import select_domain_tasks
from recpipe.models.registry import build_model
from recpipe.models.train_model import bce_loss

TRAIN_ROWS, HELD_OUT_ROWS, STEPS = 3072, 1100, 6
# Rows per table for the shipped configs these tests train (recpipe.config.caps.cap_tables): the small DIN's
# 50.3M parameters become 1.9M. A few steps on 3,072 rows touch a few thousand rows of each table, and every
# export, parity check and load of a full-size model wrote, hashed and read ~200 MB per backend.
TABLE_CAP = 20_000


class SmallModel(NamedTuple):
    model: nn.Module
    spec: FeatureSpec
    held_out: pa.Table  # raw rows after the training rows, labels included
    clean: pa.Table  # the held-out rows FG accepts, for direct scoring tests


def train_small(cfg: RecpipeConfig, kind: str, tmp: Path) -> SmallModel:
    """``cfg``'s model trained :data:`STEPS` steps on :data:`TRAIN_ROWS` generated ``kind`` rows (seed 11),
    with the next :data:`HELD_OUT_ROWS` rows held out."""
    logging.getLogger().setLevel(logging.ERROR)
    spec = build_feature_spec(cfg)
    generate(kind, TRAIN_ROWS + HELD_OUT_ROWS, tmp / kind, seed=11, chunk_rows=TRAIN_ROWS + HELD_OUT_ROWS)
    table = pq.read_table(tmp / kind)
    torch.manual_seed(0)
    model = train_steps(build_model(spec, cfg.model), spec, table.slice(0, TRAIN_ROWS), STEPS)
    held_out = table.slice(TRAIN_ROWS)
    clean, _ = clean_rows(held_out, spec, held_out.num_rows)
    return SmallModel(model, spec, held_out, clean)


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
        logits, labels = model(b.dense, b.sparse), b.labels
        if spec.domain_label is not None:  # each row's domain tower, as TrainModel reads it
            logits, labels = select_domain_tasks(logits, labels, spec.domain_num)
        loss = bce_loss(logits, labels)
        dense_opt.zero_grad()
        sparse_opt.zero_grad(set_to_none=True)
        loss.backward()
        dense_opt.step()
        sparse_opt.step()
    return model.eval()
