"""Feature-selection variational dropout over a group's concatenated features (TorchEasyRec's
``VariationalDropout``, tzrec/modules/variational_dropout.py), plain torch.

Each feature ``f`` of the group (its columns: an embedding, a dense value) has a learnt logit ``p_f``; its
dropout probability is ``d_f = sigmoid(p_f)``.

- Training: per row and feature a concrete (relaxed Bernoulli) draw
  ``z = sigmoid((log(d+ε) - log(1-d+ε) + log(u+ε) - log(1-u+ε)) / 0.1)``, ``u ~ U(0, 1)``; the feature's
  columns are multiplied by ``1 - z``.
- Evaluation and serving: the columns are multiplied by the keep probability ``1 - d_f`` (the mean of the
  training draw), deterministically; this is what exports.
- :meth:`VariationalDropout.penalty`: ``lambda / B · Σ_f (1 - d_f)``, the term the training loss adds; it
  pushes unneeded features' dropout up, so ``d_f`` ranks the features.

Example::

    vd = VariationalDropout([4, 3, 2], regularization_lambda=0.01)   # user_id (4), item_id (3), price (2)
    vd(torch.randn(8, 9)).shape        # (8, 9)
    vd.penalty(8)                      # 0.01 / 8 · Σ_f (1 - sigmoid(p_f))
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

# TorchEasyRec's concrete_dropout_neuron temperature.
TEMPERATURE = 0.1


class VariationalDropout(nn.Module):
    """Variational dropout of ``len(widths)`` features laid side by side in ``x (B, Σ widths)``.

    Args:
        widths (Sequence[int]): each feature's number of columns, in column order (at least one feature).
        regularization_lambda (float): the penalty's coefficient (TorchEasyRec's default 0.01).
        device (torch.device | None): parameter device.
    """

    def __init__(
        self, widths: Sequence[int], regularization_lambda: float = 0.01, device: torch.device | None = None
    ) -> None:
        super().__init__()
        if not widths or any(w < 1 for w in widths):
            raise ValueError(
                f"variational dropout needs one or more features of width >= 1, got {list(widths)}"
            )
        self.widths = list(widths)
        self.regularization_lambda = regularization_lambda
        # TorchEasyRec initializes the logits from a standard normal.
        self.feature_p = nn.Parameter(torch.randn(len(widths), device=device))
        # Column j belongs to feature columns[j]: indexing by a constant list exports as a plain gather.
        self.columns = [i for i, w in enumerate(widths) for _ in range(w)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] != len(self.columns):
            raise ValueError(f"variational dropout over {len(self.columns)} columns got {x.shape[1]}")
        drop = torch.sigmoid(self.feature_p).unsqueeze(0)
        if self.training:
            eps = torch.finfo(torch.float32).eps
            drop = drop.expand(x.shape[0], -1)
            u = torch.rand_like(drop)
            logit = (
                torch.log(drop + eps)
                - torch.log(1.0 - drop + eps)
                + torch.log(u + eps)
                - torch.log(1.0 - u + eps)
            )
            drop = torch.sigmoid(logit / TEMPERATURE)
        return x * (1.0 - drop[:, self.columns]).to(x.dtype)

    def penalty(self, batch_size: int) -> torch.Tensor:
        """``regularization_lambda / batch_size · Σ_f (1 - sigmoid(p_f))``."""
        return self.regularization_lambda / batch_size * (1.0 - torch.sigmoid(self.feature_p)).sum()

    def keep_probability(self) -> torch.Tensor:
        """``(F,)`` each feature's ``1 - sigmoid(p_f)``: its importance after training."""
        return 1.0 - torch.sigmoid(self.feature_p.detach())
