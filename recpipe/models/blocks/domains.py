"""Domain towers' outputs read per row (TorchEasyRec's PEPNet ``_select_domain_task_output``,
tzrec/models/pepnet.py): a model with ``D`` towers per task gives ``(B, T·D)`` logits, task ``i``'s tower for
domain ``j`` at column ``i·D + j``; its loss and metrics read, for each row, its own domain's tower."""

from __future__ import annotations

import torch


def select_domain_tasks(
    logits: torch.Tensor, labels: torch.Tensor, domain_num: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(B, T)`` logits of each row's domain tower and the ``(B, T)`` task labels, from a domain-tower
    model's ``(B, T·D)`` logits and ``(B, T + 1)`` labels whose last column is each row's domain (an integer
    in ``[0, D)``, as FG checks it: a value outside fails here too, never read as a neighbour's tower).

    Example::

        # T = 2 tasks, D = 3 domains; row 0 in domain 2, row 1 in domain 0
        logits = torch.arange(12.0).view(2, 6)       # [[0..5], [6..11]]
        labels = torch.tensor([[1.0, 0.0, 2.0], [0.0, 0.0, 0.0]])
        select_domain_tasks(logits, labels, 3)
        # (tensor([[2., 5.], [6., 9.]]), tensor([[1., 0.], [0., 0.]]))
    """
    rows, width = logits.shape
    tasks = labels.shape[1] - 1
    if width != tasks * domain_num:
        raise ValueError(
            f"{width} logits for {tasks} tasks x {domain_num} domains (labels {tuple(labels.shape)})"
        )
    domain = labels[:, -1].long()
    if rows and (int(domain.min()) < 0 or int(domain.max()) >= domain_num):
        bad = domain[(domain < 0) | (domain >= domain_num)][0]
        raise ValueError(f"domain label value {int(bad)} is outside [0, {domain_num})")
    index = domain.view(rows, 1, 1).expand(rows, tasks, 1)
    return logits.view(rows, tasks, domain_num).gather(2, index).squeeze(2), labels[:, :tasks]
