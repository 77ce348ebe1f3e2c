"""Training and evaluating a retrieval model on one process: rows → FG → Batch, each batch's sampled negatives
(or in-batch ones) → :class:`~recpipe.models.retrieval_train.RetrievalTrainModel`; then recall@K over the whole
item catalogue (:func:`recpipe.eval.retrieval.evaluate_retrieval`).

This is the first retrieval entry, in memory and unsharded (no DistributedModelParallel, no checkpoint, no
``recpipe train`` stage yet): what the DSSM tests and docs/retrieval.md run. Reads top to bottom: config →
data → model → loop → evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from recpipe.batch import Batch, to_batch
from recpipe.config import OptimizerConfig, RecpipeConfig
from recpipe.data.negative_sampler import ItemTable, NegativeSampler, load_item_table
from recpipe.features.fg import FeatureGenerator
from recpipe.features.spec import FeatureSpec
from recpipe.models.protocol import MultiInterestModel, RetrievalModel
from recpipe.models.registry import build_model
from recpipe.models.retrieval_train import RetrievalTrainModel

_OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adagrad": torch.optim.Adagrad,
    "adam": torch.optim.Adam,
    "sgd": torch.optim.SGD,
}


@dataclass(frozen=True)
class RetrievalRun:
    """A trained retrieval model and its training losses.

    Args:
        model (torch.nn.Module): the model (a :class:`~recpipe.models.protocol.RetrievalModel`), in eval mode.
        losses (list[float]): the loss of every step.
    """

    model: torch.nn.Module
    losses: list[float]


def rows_batch(fg: FeatureGenerator, rows: pa.Table) -> Batch:
    """The Batch of ``rows`` (every FeatureSpec column present)."""
    return to_batch(fg(rows), fg.keys)


def item_rows(attrs: pa.Table, schema: pa.Schema, zeros: tuple[str, ...] = ()) -> pa.Table:
    """``attrs`` (an item table's ``attr_fields`` columns) as rows of the training schema: every other column
    null (the item tower reads only its own), the columns ``zeros`` (the labels) 0, unread. TorchEasyRec appends the sampled items'
    attributes to the batch's item side alike (tzrec/datasets/dataset.py). A text attribute (graph-learn's
    ``attrs`` split) is cast to the column's type, its empty parts null (graph-learn writes a missing one so)."""
    n = attrs.num_rows
    columns = []
    for f in schema:
        if f.name in attrs.column_names:
            col = attrs.column(f.name)
            if pa.types.is_string(col.type) and not pa.types.is_string(f.type):
                col = pc.if_else(pc.equal(col, ""), pa.scalar(None, col.type), col)
            columns.append(col.cast(f.type))
        else:
            columns.append(pa.array(np.zeros(n), f.type) if f.name in zeros else pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def check_item_columns(spec: FeatureSpec, group: str, items: ItemTable) -> None:
    """Every input column of the item tower's group must be an ``attr_fields`` column: a sampled item's other
    columns are null, so its tower would read nothing there (TorchEasyRec's sampler returns only attr_fields too)."""
    g = spec.group(group)
    dense = {d.name: d for d in spec.dense}
    columns = []
    for key in [*g.sparse, *g.dense]:
        f = dense[key] if key in dense else spec.feature(key)
        columns += [f.column, *f.inputs]
    missing = sorted({c for c in columns if c not in items.attr_fields})
    if missing:
        raise ValueError(
            f"{items.where}: the item tower's group {group!r} reads column(s) {missing} that are not in "
            f"attr_fields {items.attr_fields}: a sampled item would have none"
        )


def _optimizers(
    model: torch.nn.Module, sparse: OptimizerConfig, dense: OptimizerConfig
) -> list[torch.optim.Optimizer]:
    """``train.sparse_optimizer`` over the embedding tables, ``train.dense_optimizer`` over the rest (lr only:
    unsharded tables take torch's optimizers, not FBGEMM's fused ones)."""
    for where, cfg in (("sparse_optimizer", sparse), ("dense_optimizer", dense)):
        if cfg.type not in _OPTIMIZERS:
            raise ValueError(f"train.{where} {cfg.type!r}: the retrieval trainer takes {sorted(_OPTIMIZERS)}")
    tables = [p for n, p in model.named_parameters() if "_embeddings." in n]
    rest = [p for n, p in model.named_parameters() if "_embeddings." not in n]
    return [_OPTIMIZERS[sparse.type](tables, lr=sparse.lr), _OPTIMIZERS[dense.type](rest, lr=dense.lr)]


def train_retrieval(
    cfg: RecpipeConfig,
    spec: FeatureSpec,
    rows: pa.Table,
    items: ItemTable | None = None,
    num_sample: int | None = None,
    steps: int | None = None,
    seed: int = 0,
    item_log_q: bool = False,
    environ: Mapping[str, str] | None = None,
) -> RetrievalRun:
    """Train ``cfg.model`` (a retrieval model) for ``steps`` batches of ``data.batch_size`` rows drawn from
    ``rows`` (reshuffled each pass), each against ``num_sample`` negatives from ``items`` (none in batch).

    Args:
        cfg (RecpipeConfig): the config (``model``, ``data.batch_size``, ``data.negative_sampler``, ``train``).
        spec (FeatureSpec): its FeatureSpec.
        rows (pa.Table): the positive rows.
        items (ItemTable | None): the catalogue (``item_id_field`` a column of ``rows``); None: read from
            ``data.negative_sampler`` (:func:`~recpipe.data.negative_sampler.load_item_table`), or none at all
            for in-batch negatives without log-Q.
        num_sample (int | None): negatives per batch (ignored in batch); None: ``data.negative_sampler.num_sample``.
        steps (int | None): optimizer steps; None: ``train.max_steps``, else ``train.epochs`` passes over ``rows``.
        seed (int): seed of the model's initialization, the row order and the sampler.
        item_log_q (bool): with the model's ``log_q_correction``: the in-batch log-Q is each item's log
            ``weight / Σ weight`` in ``items`` (its share of the rows when the weights are frequencies).
        environ (Mapping | None): the environment for ``{NAME}`` placeholders of the item table's path.

    Raises:
        ValueError: sampled negatives without an item table or ``num_sample`` (neither given nor in
            ``data.negative_sampler``), or an item tower reading a column the item table does not hold.

    Example::

        run = train_retrieval(cfg, spec, rows, ItemTable(items, "item_id", ["item_id", "cate_id"]), 64, 200)
        run = train_retrieval(cfg, spec, rows)        # items, num_sample, steps from the config
        evaluate_retrieval(run.model, spec, eval_rows, items, (50,))[50].recall   # recpipe.eval.retrieval
    """
    torch.manual_seed(seed)
    model = build_model(spec, cfg.model)
    if not isinstance(model, (RetrievalModel, MultiInterestModel)):
        raise ValueError(f"model {cfg.model.type!r} is not a retrieval model")
    in_batch = bool(model.in_batch_negative)
    correct = bool(model.log_q_correction)
    sampler_cfg = cfg.data.negative_sampler
    if items is None and sampler_cfg is not None:
        items = load_item_table(sampler_cfg, cfg.data.params, environ)
    if items is None and (not in_batch or correct):
        raise ValueError(
            f"model {cfg.model.type!r} trains on sampled negatives (or log-Q): give data.negative_sampler "
            "(the item table) or an ItemTable"
        )
    if num_sample is None and not in_batch:
        if sampler_cfg is None:
            raise ValueError("sampled negatives need num_sample: give data.negative_sampler.num_sample")
        num_sample = sampler_cfg.num_sample
    if steps is None:
        steps = cfg.train.max_steps or cfg.train.epochs * -(-rows.num_rows // cfg.data.batch_size)
    if not in_batch and items is not None:
        check_item_columns(spec, str(model.item_group), items)
    train = RetrievalTrainModel(model)
    train.train()
    fg = FeatureGenerator(spec)
    labels = tuple(spec.labels)
    sampler = None
    if not in_batch and items is not None and num_sample is not None:
        sampler = NegativeSampler(items, num_sample, seed=seed)
    opts = _optimizers(model, cfg.train.sparse_optimizer, cfg.train.dense_optimizer)
    if correct and in_batch and not item_log_q:
        raise ValueError(
            "log_q_correction in batch needs the items' sampling probabilities: pass item_log_q=True"
        )
    rng = np.random.default_rng(seed)
    order = rng.permutation(rows.num_rows)
    at, size = 0, cfg.data.batch_size
    losses = []
    for _ in range(steps):
        if at + size > order.size:
            order, at = rng.permutation(rows.num_rows), 0
        chunk = rows.take(pa.array(order[at : at + size]))
        at += size
        batch = rows_batch(fg, chunk)
        ids = None if items is None else chunk.column(items.item_id_field).combine_chunks()
        negatives = log_q = neg_log_q = None
        if sampler is not None:
            neg = sampler.sample(ids)
            negatives = rows_batch(fg, item_rows(neg.attrs, rows.schema, labels))
        if correct:
            # Q of the positives on the scale of the negatives' (one normaliser: only differences count)
            log_q = torch.from_numpy(
                _positive_log_q(
                    items, ids, None if in_batch else neg.log_q, neg.rows if not in_batch else None
                )
            )
            neg_log_q = None if in_batch else torch.from_numpy(neg.log_q)
        loss, _ = train(batch, negatives, log_q, neg_log_q)
        for opt in opts:
            opt.zero_grad()
        loss.backward()
        for opt in opts:
            opt.step()
        losses.append(float(loss.detach()))
    model.eval()
    return RetrievalRun(model, losses)


def _positive_log_q(
    items: ItemTable, ids: pa.Array, neg_log_q: np.ndarray | None, neg_rows: np.ndarray | None
) -> np.ndarray:
    """``(B,)`` log ``weight / Σ weight`` of the rows' items; with sampled negatives, over the same total as the
    negatives' (the items the batch did not exclude), read off one drawn negative."""
    rows = items.rows_of(ids)
    w = items.weights[rows]
    if not (w > 0).all():
        lost = ids[int(np.flatnonzero(w <= 0)[0])].as_py()
        raise ValueError(f"{items.where}: item {lost!r} has weight 0: its log-Q correction is undefined")
    if neg_log_q is None or neg_rows is None:
        return np.log(w / items.weights.sum())
    log_total = np.log(items.weights[neg_rows[0]]) - neg_log_q[0]
    return np.log(w) - log_total
