"""The training wrapper: the loss lives here so the inner model stays loss-free and exportable."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from recpipe.batch import Batch
from recpipe.models.blocks.distill import distillation_terms
from recpipe.models.blocks.domains import select_domain_tasks
from recpipe.models.blocks.multitask import TwoClassLogit
from recpipe.models.protocol import MultiInterestModel, RetrievalModel

if TYPE_CHECKING:  # annotations only: no torchrec at import
    from torchrec.sparse.jagged_tensor import KeyedJaggedTensor


class TrainModel(nn.Module):
    """Wraps a ranking model with binary cross-entropy on its logits (sample-weighted when given), or a focal
    or JRC loss per task, plus the model's regularization term.

    ``forward(batch)`` returns ``(loss, logits)``, the shape TorchRec's train pipelines expect.

    Args:
        model (nn.Module): a ranking model with ``predict(batch) -> (B,)`` logits, or ``(B, T)`` for a
            multi-task model (whose ``task_weights`` weigh each task's loss and whose ``task_losses``, when
            set, give a task's focal ``(gamma, alpha)``, None for BCE, and whose ``task_jrc``, when set,
            give a task's JRC ``(session feature, alpha)``: that task's tower ends in a
            :class:`~recpipe.models.blocks.multitask.TwoClassLogit`, whose ``(l0, l1)`` the loss reads during
            the forward); a ``regularization(batch_size)`` (a variational dropout's term, or None) is added
            to the loss. A distilled model (``distillation(batch) ->``
            :class:`~recpipe.models.blocks.distill.Distillation`, RocketLaunching) trains its light and
            booster nets' BCE plus :func:`~recpipe.models.blocks.distill.distillation_terms`; its logits are
            the light net's (evaluation, in eval mode, is the light net's BCE alone, as TorchEasyRec's).
            A model with domain towers (``task_domains``: ``D``, PEPNet's ``domain_label``) gives ``(B, T·D)``
            logits over ``(B, T + 1)`` labels, the last each row's domain: the loss, and the logits returned,
            are each row's domain tower's (:func:`~recpipe.models.blocks.domains.select_domain_tasks`).

    Example::

        train = TrainModel(build_model(spec, cfg.model))
        loss, logits = train(batch)   # loss: scalar; logits: (B,)
        loss.backward()
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if isinstance(model, (RetrievalModel, MultiInterestModel)):
            raise ValueError(
                f"{type(model).__name__} is a retrieval model (two towers): it trains a softmax over negatives "
                "(recpipe.models.retrieval_train.RetrievalTrainModel), not the ranking loss"
            )
        self.model = model
        self.task_domains = int(getattr(model, "task_domains", 0))
        # A multi-task model's (B, T) logits: the loss is Σ_t weight_t · BCE_t (TorchEasyRec's task weights).
        task_weights = getattr(model, "task_weights", None)
        self.register_buffer(
            "task_weights", None if task_weights is None else torch.tensor(task_weights, dtype=torch.float32)
        )
        # Tasks with a task space (TorchEasyRec's task_space_indicator_label): per task the indicator label's
        # column (-1: none) and the in / out weights.
        spaces = getattr(model, "task_spaces", None)
        self.register_buffer(
            "task_space", None if spaces is None else torch.tensor([s or (-1, 1.0, 1.0) for s in spaces])
        )
        # Per task (on, gamma, alpha) of a focal loss; off: binary cross-entropy.
        losses = getattr(model, "task_losses", None)
        self.register_buffer(
            "focal",
            None
            if losses is None
            else torch.tensor([(1.0, *f) if f else (0.0, 0.0, 0.5) for f in losses], dtype=torch.float32),
        )
        # Per task the JRC loss's alpha (1: none), its session feature and its TwoClassLogit's pair layer.
        jrc = getattr(model, "task_jrc", None)
        self.register_buffer(
            "jrc_alpha", None if jrc is None else torch.tensor([1.0 if j is None else j[1] for j in jrc])
        )
        self.jrc_sessions = [] if jrc is None else [None if j is None else j[0] for j in jrc]
        self.jrc_pairs = [] if jrc is None else _pair_paths(model, list(model.task_names), jrc)

    def forward(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        distill = getattr(self.model, "distillation", None)
        if distill is not None and self.training:
            out = distill(batch)
            loss = bce_loss(out.light, batch.labels, batch.weights) + bce_loss(
                out.booster, batch.labels, batch.weights
            )
            return loss + distillation_terms(out, batch.weights), out.light.detach()
        jrc = None
        labels = batch.labels
        if self.jrc_alpha is None:
            logits = self.model.predict(batch)
            if self.task_domains:
                logits, labels = select_domain_tasks(logits, labels, self.task_domains)
        else:
            pairs = [None if p is None else self.model.get_submodule(p) for p in self.jrc_pairs]
            with _outputs_of(pairs) as seen:
                logits = self.model.predict(batch)
            terms = [
                torch.zeros_like(batch.labels[:, t], dtype=torch.float32)
                if key is None
                else jrc_session_loss(seen[t][-1], batch.labels[:, t], session_ids(batch.sparse, key))
                for t, key in enumerate(self.jrc_sessions)
            ]
            jrc = (self.jrc_alpha, torch.stack(terms, dim=1))
        weights = batch.weights
        if self.task_space is not None:
            weights = task_space_weights(labels, self.task_space, weights)
        loss = bce_loss(logits, labels, weights, self.task_weights, self.focal, jrc)
        term = self.model.regularization(logits.shape[0]) if hasattr(self.model, "regularization") else None
        if term is not None:  # TorchEasyRec sums every loss of the model (tzrec/main.py)
            loss = loss + term.to(loss.dtype)
        return loss, logits.detach()


def _pair_paths(model: nn.Module, tasks: list[str], jrc: list[tuple[str, float] | None]) -> list[str | None]:
    """Per task, the path in ``model`` of its TwoClassLogit's ``pair`` layer (None: a task without JRC)."""
    found = {m.task: f"{name}.pair" for name, m in model.named_modules() if isinstance(m, TwoClassLogit)}
    missing = [t for t, j in zip(tasks, jrc) if j is not None and t not in found]
    if missing:
        raise ValueError(f"tasks {missing} have a jrc loss but their towers are not two-class (num_class: 2)")
    return [None if j is None else found[t] for t, j in zip(tasks, jrc)]


@contextmanager
def _outputs_of(modules: list[nn.Module | None]) -> Iterator[list[list[torch.Tensor]]]:
    """Collects each module's outputs while the block runs (forward hooks, removed after it)."""
    seen: list[list[torch.Tensor]] = [[] for _ in modules]
    handles = [
        m.register_forward_hook(lambda _m, _in, out, box=box: box.append(out))
        for m, box in zip(modules, seen)
        if m is not None
    ]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def session_ids(sparse: KeyedJaggedTensor, key: str) -> torch.Tensor:
    """``(B,)`` each row's session: the first id of feature ``key``, 0 for a row without one (TorchEasyRec's
    ``to_padded_dense(1)[:, 0]``, tzrec/models/rank_model.py: such rows share session 0 with id 0's rows)."""
    return sparse[key].to_padded_dense(1)[:, 0]


def jrc_session_loss(pair: torch.Tensor, labels: torch.Tensor, sessions: torch.Tensor) -> torch.Tensor:
    """``(B,)`` JRC's session term per row (TorchEasyRec's ``JRCLoss``, tzrec/loss/jrc_loss.py, arXiv
    2208.06164): a positive row's cross-entropy of its ``l1`` among the ``l1`` of itself and its session's
    negatives; a negative row's of its ``l0`` among the ``l0`` of itself and its session's positives. The
    batch's mean of it is TorchEasyRec's ``loss_pos · pos_num / B + loss_neg · neg_num / B``; a batch without
    positives (or negatives) gives 0 here, where TorchEasyRec's mean over no rows is NaN.

    Args:
        pair (torch.Tensor): ``(B, 2)`` logits ``(l0, l1)``.
        labels (torch.Tensor): ``(B,)`` 0/1 (a row is a positive where it is 1).
        sessions (torch.Tensor): ``(B,)`` session ids.

    Example::

        # one session, rows 0 (negative) and 1 (positive); each row competes with the other
        jrc_session_loss(torch.tensor([[0.9, 0.1], [0.3, 0.7]]), torch.tensor([0.0, 1.0]), torch.tensor([1, 1]))
        # tensor([0.4375, 0.4375]): -log softmax(0.9, 0.3)[0], -log softmax(0.7, 0.1)[0]
    """
    pair = pair.float()
    pos = labels == 1
    same = sessions.unsqueeze(1) == sessions.unsqueeze(0)
    rivals = pos.unsqueeze(1) != pos.unsqueeze(0)
    itself = torch.eye(len(labels), dtype=torch.bool, device=pair.device)
    # row i's scores: the l1 of every row for a positive i, the l0 for a negative i
    scores = torch.where(pos.unsqueeze(1), pair[:, 1].unsqueeze(0), pair[:, 0].unsqueeze(0))
    scores = scores.masked_fill(~(same & (rivals | itself)), float("-inf"))
    return torch.logsumexp(scores, dim=1) - torch.where(pos, pair[:, 1], pair[:, 0])


def focal_factor(logits: torch.Tensor, labels: torch.Tensor, focal: torch.Tensor) -> torch.Tensor:
    """The focal loss's weight of each row's BCE, ``alpha·y·(1-p)^gamma + (1-alpha)·(1-y)·p^gamma`` with
    ``p = sigmoid(logit)``, held constant in the gradient (TorchEasyRec's ``BinaryFocalLoss``,
    tzrec/loss/focal_loss.py); 1 for a task without a focal loss.

    Args:
        logits (torch.Tensor): ``(B, T)`` (or ``(B,)`` with one task).
        labels (torch.Tensor): 0/1, the shape of ``logits``.
        focal (torch.Tensor): ``(T, 3)``: per task ``on`` (1: focal), ``gamma``, ``alpha``.

    Example::

        focal_factor(torch.tensor([[0.0]]), torch.tensor([[1.0]]), torch.tensor([[1.0, 2.0, 0.5]]))
        # tensor([[0.1250]]): 0.5 · (1 - 0.5)^2
    """
    on, gamma, alpha = (focal[:, i].to(logits.dtype) for i in range(3))
    if logits.dim() == 1:
        on, gamma, alpha = on[0], gamma[0], alpha[0]
    p = torch.sigmoid(logits.detach())
    factor = alpha * labels * (1 - p) ** gamma + (1 - alpha) * (1 - labels) * p**gamma
    return torch.where(on > 0, factor, torch.ones_like(factor))


def task_space_weights(
    labels: torch.Tensor, task_space: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """``(B, T)`` loss weights of a multi-task batch: the sample weight (1 without one) times, for a task with a
    task space, ``in`` where its indicator label is > 0 and ``out`` elsewhere (TorchEasyRec's
    ``MultiTaskRank.loss``, tzrec/models/multi_task_rank.py; :func:`bce_loss` then normalizes each task's by its
    sum, as TorchEasyRec divides by the mean).

    Args:
        labels (torch.Tensor): ``(B, T)`` the tasks' labels.
        task_space (torch.Tensor): ``(T, 3)``: the indicator label's column (``-1``: the task has no task space),
            ``in`` and ``out``.
        weights (torch.Tensor | None): ``(B,)`` sample weights.

    Example::

        # cvr's space is the clicked rows: in 1, out 0
        task_space_weights(torch.tensor([[1., 1.], [0., 0.]]), torch.tensor([[-1, 1, 1], [0, 1, 0]]))
        # tensor([[1., 1.], [1., 0.]])
    """
    column = task_space[:, 0].long()
    inside = labels[:, column.clamp(min=0)] > 0
    factor = torch.where(inside, task_space[:, 1], task_space[:, 2]).to(torch.float32)
    factor = torch.where(column >= 0, factor, torch.ones_like(factor))
    return factor if weights is None else factor * weights.to(factor.dtype).unsqueeze(1)


def bce_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    weights: torch.Tensor | None = None,
    task_weights: torch.Tensor | None = None,
    focal: torch.Tensor | None = None,
    jrc: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Mean binary cross-entropy with logits; with ``weights`` the weighted mean ``Σ w·l / Σ w`` (0 where every
    weight is 0); for ``(B, T)`` logits (a multi-task model) each task's mean, summed with ``task_weights``
    (default 1 each), ``(B, T)`` weights weighting each task's rows on their own. With ``focal``, a focal
    task's rows are its BCE times :func:`focal_factor`, averaged alike (TorchEasyRec: the mean, or with sample
    weights ``mean(l · w / mean(w))``, the same weighted mean).

    Args:
        logits (torch.Tensor): ``(B,)``, or ``(B, T)``.
        labels (torch.Tensor): 0/1, the shape of ``logits``.
        weights (torch.Tensor | None): ``(B,)`` non-negative sample weights, or ``(B, T)`` per task.
        task_weights (torch.Tensor | None): ``(T,)`` loss weight of each task.
        focal (torch.Tensor | None): ``(T, 3)`` per task ``on``, ``gamma``, ``alpha`` (:func:`focal_factor`).
        jrc (tuple[torch.Tensor, torch.Tensor] | None): ``(alpha (T,), session terms (B, T))``: each row's
            loss is ``alpha · BCE + (1 - alpha) · term`` (TorchEasyRec's ``JRCLoss``: its two-class
            cross-entropy equals BCE on the logit ``l1 - l0``; :func:`jrc_session_loss`), averaged as BCE is
            (TorchEasyRec's weighted mean of its per-row loss); alpha 1 and term 0 for a task without JRC.
    """
    if labels.shape != logits.shape:
        raise ValueError(f"labels {tuple(labels.shape)} do not match logits {tuple(logits.shape)}")
    logits = logits.float()  # a mixed-precision forward's bf16/fp16 logits: the loss is summed in float32
    labels = labels.to(logits.dtype)
    per_row = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
    if focal is not None:
        per_row = per_row * focal_factor(logits, labels, focal)
    if jrc is not None:
        alpha, term = jrc[0].to(per_row.dtype), jrc[1].to(per_row.dtype)
        per_row = alpha * per_row + (1 - alpha) * term
    if weights is None:
        per_task = per_row.mean(dim=0)
    else:
        w = weights.to(logits.dtype)
        if w.dim() < per_row.dim():
            w = w.unsqueeze(1)
        total = w.sum(dim=0).clamp_min(torch.finfo(logits.dtype).tiny)
        per_task = (per_row * w).sum(dim=0) / total
    if per_row.dim() == 1:
        return per_task
    if task_weights is not None:
        per_task = per_task * task_weights.to(per_task.dtype)
    return per_task.sum()
