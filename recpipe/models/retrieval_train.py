"""The training wrapper of a retrieval model: the softmax cross-entropy of each row's positive item among its
negatives (:mod:`recpipe.models.blocks.retrieval_loss`), so the two-tower model stays loss-free."""

from __future__ import annotations

import torch
from torch import nn

from recpipe.batch import Batch
from recpipe.models.blocks.retrieval_loss import (
    in_batch_labels,
    in_batch_logits,
    sampled_labels,
    sampled_logits,
    softmax_cross_entropy,
)
from recpipe.models.protocol import MultiInterestModel, RetrievalModel


class RetrievalTrainModel(nn.Module):
    """Wraps a :class:`~recpipe.models.protocol.RetrievalModel` (DSSM) or a
    :class:`~recpipe.models.protocol.MultiInterestModel` (MIND: each row's user vector is its interests attended
    by its positive item, also against the negatives, as TorchEasyRec's MIND) with its loss: TorchEasyRec's
    ``MatchModel.loss`` (tzrec/models/match_model.py), plus recpipe's optional log-Q correction.

    The model's ``in_batch_negative`` picks the negatives: the batch's other rows' items (``(B, B)`` logits),
    or the sampled ``negatives`` every row shares (``(B, 1 + N)``, the positive in column 0). With the model's
    ``log_q_correction`` the caller passes the log sampling probabilities.

    Args:
        model (nn.Module): a retrieval model with ``temperature``, ``in_batch_negative`` and
            ``log_q_correction``.

    Example::

        train = RetrievalTrainModel(build_model(spec, cfg.model))
        neg = sampler.sample(rows.column("item_id"))                 # recpipe.data.negative_sampler
        loss, logits = train(batch, negatives=negatives_batch)       # logits (B, 1 + N)
        loss.backward()
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        if not isinstance(model, (RetrievalModel, MultiInterestModel)):
            raise ValueError(
                f"{type(model).__name__} is not a retrieval model (user_embedding or user_interests, "
                "item_embedding)"
            )
        self.model = model

    def forward(
        self,
        batch: Batch,
        negatives: Batch | None = None,
        log_q: torch.Tensor | None = None,
        negative_log_q: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, logits)``.

        Args:
            batch (Batch): the positive rows (user and item features of each).
            negatives (Batch | None): the sampled items' rows (item features only are read); required unless
                the model trains in batch, refused when it does.
            log_q (torch.Tensor | None): ``(B,)`` log sampling probability of each row's item (in batch: its
                share of the training rows; sampled: its weight's share of the item table); required with
                ``log_q_correction``, refused without.
            negative_log_q (torch.Tensor | None): ``(N,)`` the negatives' (sampled, with ``log_q_correction``).
        """
        model = self.model
        in_batch = bool(model.in_batch_negative)
        if in_batch and negatives is not None:
            raise ValueError(
                "the model trains with in-batch negatives (in_batch_negative: true); negatives given"
            )
        if not in_batch and negatives is None:
            raise ValueError("the model trains with sampled negatives (in_batch_negative: false); none given")
        correct = bool(model.log_q_correction)
        if correct and (log_q is None or (not in_batch and negative_log_q is None)):
            raise ValueError(
                "log_q_correction: true needs the log sampling probabilities of the batch's items"
            )
        if not correct and (log_q is not None or negative_log_q is not None):
            raise ValueError("log sampling probabilities given, but the model has log_q_correction: false")
        item = model.item_embedding(batch.dense, batch.sparse)
        if isinstance(model, MultiInterestModel):  # MIND: the interests attended by each row's positive
            interests, mask = model.user_interests(batch.dense, batch.sparse)
            user = model.attend(interests, mask, item)
        else:
            user = model.user_embedding(batch.dense, batch.sparse)
        if in_batch:
            logits = in_batch_logits(user, item, model.temperature, log_q)
            labels = in_batch_labels(logits)
        else:
            assert negatives is not None
            neg = model.item_embedding(negatives.dense, negatives.sparse)
            logits = sampled_logits(user, item, neg, model.temperature, log_q, negative_log_q)
            labels = sampled_labels(logits)
        loss = softmax_cross_entropy(logits, labels, batch.weights)
        regularization = getattr(model, "regularization", None)  # a variational dropout's penalty
        term = None if regularization is None else regularization(user.shape[0])
        return (loss if term is None else loss + term), logits.detach()
