"""How close to the oracle AUC can any model get on generated data of a given size?

The oracle knows every id's random effect; a model has to estimate them from the training rows. This
script estimates them as well as the click model allows — knowing its form and its priors — and
reports the AUC of the result on held-out rows:

- ``taobao``: every user, ad and category effect (Gaussian priors of the generator) fitted by
  backfitting Newton steps of the exact logistic likelihood, all other terms of the logit known;
  ``--task buy``: the buy label's ceiling, the click model's estimate times the conversion model's (its
  user buying and ad conversion effects fitted the same way on the clicked training rows);
- ``criteo``: a logistic regression (L2, lbfgs) on the exact one-hot categorical values and the true
  dense transforms (``z(I)`` and a missing flag) — the additive part only, so run it with
  ``--no-pairs`` to compare with the oracle of data without pair effects.

The gap between ``oracle`` and ``ceiling`` is what no model can close at that size; the quality
benchmark's target (``benchmarks/quality.py``) only makes sense where it is small.

Run: ``.venv/bin/python benchmarks/learnable_ceiling.py taobao --rows 2000000 [--users 4000 --ads 2000]``
(~30 s; ``--task buy`` for the buy label) or ``... criteo --rows 3000000 --max-vocab 2000 --no-pairs`` (~3 minutes).
``--quick``: 20,000 rows, a catalogue of 500 users and 250 ads, Criteo vocabularies of 200; without a kind it
runs both (criteo, then taobao: one last line each). Nothing is written to ``benchmarks/results/`` either way.
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp
from _common import parse_args
from sklearn.linear_model import LogisticRegression

from recpipe.auc import binary_auc
from recpipe.data.synthetic import criteo, taobao
from recpipe.data.synthetic.common import sigmoid

EVAL_FRACTION = 0.125


Effect = tuple[np.ndarray, np.ndarray, float]  # (index per row, true effects, prior sd)


def backfit(known: np.ndarray, effects: list[Effect], y: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The logit ``known + Σ effect[index]`` with every effect estimated from ``rows`` by backfitting Newton
    steps of the exact logistic likelihood under the effects' Gaussian priors."""
    est = [np.zeros(e.size) for _, e, _ in effects]

    def fitted() -> np.ndarray:
        return known + sum(est[k][effects[k][0]] for k in range(len(effects)))

    for _ in range(4):  # backfitting rounds
        for j, (idx, _, sd) in enumerate(effects):
            for _ in range(3):  # Newton steps of the penalized likelihood for this effect
                q = sigmoid(fitted()[rows])
                grad = np.bincount(idx[rows], weights=y[rows] - q, minlength=est[j].size) - est[j] / sd**2
                hess = np.bincount(idx[rows], weights=q * (1 - q), minlength=est[j].size) + 1 / sd**2
                est[j] += np.clip(grad / hess, -1.0, 1.0)  # damped: a full step can overshoot and diverge
    return fitted()


def taobao_ceiling(
    rows: int, users: int | None, ads: int | None, seed: int, task: str = "clk"
) -> tuple[float, float]:
    """The click task's (``clk``) or the buy task's (``buy``) oracle and learnable-ceiling AUCs."""
    cat = taobao.build_catalogue(seed, rows, users=users, ads=ads)
    rng = np.random.default_rng([seed, 1])
    d = taobao._draw(cat, rng, rows)
    logit = cat.base + d["logit"]
    prob = sigmoid(logit)
    y = (rng.random(rows) < prob).astype(np.float64)
    held = rng.random(rows) < EVAL_FRACTION
    tr = ~held
    effects = [  # as drawn in taobao.build_catalogue
        (d["user"], cat.user_effect, 0.5),
        (d["ad"], cat.ad_effect, 0.5),
        (cat.ad_cate[d["ad"]], cat.cate_effect, 0.3),
    ]
    click = backfit(logit - sum(e[idx] for idx, e, _ in effects), effects, y, tr)
    if task == "clk":
        return binary_auc(y[held], prob[held]), binary_auc(y[held], click[held])
    # buy: drawn for clicked rows only (taobao.make_chunk), so its effects are learnt from the clicks
    cvr_logit = cat.cvr_base + d["cvr_logit"]
    cvr_prob = sigmoid(cvr_logit)
    buy = y * (rng.random(rows) < cvr_prob)
    cvr_effects = [(d["user"], cat.user_buy_effect, 0.7), (d["ad"], cat.ad_cvr_effect, 0.7)]
    cvr = backfit(cvr_logit - sum(e[idx] for idx, e, _ in cvr_effects), cvr_effects, buy, tr & (y == 1))
    # P(buy) = P(click) * P(buy | click): the product of the two estimates
    fitted = np.log(sigmoid(click)) + np.log(sigmoid(cvr))
    return binary_auc(buy[held], (prob * cvr_prob)[held]), binary_auc(buy[held], fitted[held])


def criteo_ceiling(rows: int, max_vocab: int | None, no_pairs: bool, seed: int) -> tuple[float, float]:
    if no_pairs:
        criteo.PAIR_EFFECT_SD = 1e-9
    model = criteo.build_model(seed, max_vocab)
    rng = np.random.default_rng([seed, 2])
    d = criteo._draw(model, rng, rows)
    prob = sigmoid(model.base + d["logit"])
    y = (rng.random(rows) < prob).astype(np.int64)
    held = rng.random(rows) < EVAL_FRACTION
    index = np.arange(rows)
    blocks = []
    for c, (idx, null) in enumerate(zip(d["cats"], d["cat_null"])):
        keep = ~null
        shape = (rows, model.cat_effect[c].size)
        blocks.append(sp.csr_matrix((np.ones(keep.sum()), (index[keep], idx[keep])), shape=shape))
    dense = []
    for j, (values, null) in enumerate(zip(d["dense"], d["dense_null"])):
        z = (np.log1p(np.maximum(values, 0)) - criteo.DENSE_MU[j]) / criteo.DENSE_SIGMA
        dense += [np.where(null, 0.0, z), null.astype(np.float64)]
    x = sp.hstack([*blocks, sp.csr_matrix(np.stack(dense, 1))]).tocsr()
    fit = LogisticRegression(C=1.0, max_iter=300).fit(x[~held], y[~held])
    return binary_auc(y[held], prob[held]), binary_auc(y[held], fit.decision_function(x[held]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "kind", nargs="?", choices=["taobao", "criteo"], help="the generator (both with --quick)"
    )
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--users", type=int, default=None, help="taobao catalogue users")
    parser.add_argument("--ads", type=int, default=None, help="taobao catalogue ads")
    parser.add_argument("--max-vocab", type=int, default=None, help="criteo vocabulary cap")
    parser.add_argument("--no-pairs", action="store_true", help="criteo without pair effects")
    parser.add_argument("--task", choices=["clk", "buy"], default="clk", help="taobao label")
    parser.add_argument("--seed", type=int, default=0)
    args = parse_args(parser, {"rows": 20_000, "users": 500, "ads": 250, "max_vocab": 200})
    if args.kind is None and not args.quick:
        parser.error("the kind (taobao or criteo) is required without --quick")
    for kind in [args.kind] if args.kind else ["criteo", "taobao"]:
        if kind == "taobao":
            oracle, ceiling = taobao_ceiling(args.rows, args.users, args.ads, args.seed, args.task)
        else:
            oracle, ceiling = criteo_ceiling(args.rows, args.max_vocab, args.no_pairs, args.seed)
        task = f" task={args.task}" if kind == "taobao" else ""
        print(
            f"learnable_ceiling: kind={kind}{task} rows={args.rows} oracle_auc={oracle:.4f} ceiling_auc={ceiling:.4f}"
        )


if __name__ == "__main__":
    main()
