"""Synthetic Criteo display-ad data: ``label``, 13 heavy-tailed counts ``I1..I13`` and 26 hashed
categoricals ``C1..C26`` (8 hex chars) — or, ``hashed``, TorchEasyRec's ``int_0..int_12`` and integer ids
``cat_0..cat_25`` — with missing values and a known click model:

    logit = base + sum_j w_j * z(I_j) (or a missing-value effect) + sum_c e_c[C_c]
                 + pair effects of (C2, C14) and (C6, C11)

with ``z(I) = (log(1 + I) - mu) / sigma``, per-value effects ``e_c`` fixed per seed, and ``base``
calibrated for about 25% positives. A pair effect is low rank, ``<u_a[C_a], v_b[C_b]>`` with latent
vectors of :data:`PAIR_RANK` dims per value (standard deviation :data:`PAIR_EFFECT_SD`): the
structure that factorization machines and DLRM's dot interaction assume (a value's taste for the
other column's values), learnable from a value's own impressions, unlike an arbitrary table over
every pair of values.

With ``pairs=2`` the pair effects are a factorization machine's instead: one latent vector ``w_c[C_c]``
of :data:`FM_RANK` dims per value of every categorical column, and ``sum over all column pairs a < b of
<w_a[C_a], w_b[C_b]>`` (TorchEasyRec's DeepFM FM term, ``tzrec/modules/fm.py``, models exactly this),
scaled to about the two pairs' total standard deviation; the first-order terms are the same draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from recpipe.data.synthetic.common import ZipfSampler, calibrate_base, sigmoid

# Per-column vocabulary sizes as in the Kaggle Criteo data, capped at 1e5.
CARDINALITIES = (
    *(1460, 583, 100_000, 100_000, 305, 24, 12_517, 633, 3, 93_145, 5683, 100_000, 3194),
    *(27, 14_992, 100_000, 10, 5652, 2173, 4, 100_000, 18, 15, 100_000, 105, 100_000),
)
CAT_NULL_RATES = (
    *(0.0, 0.0, 0.03, 0.03, 0.0, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 0.03, 0.0),
    *(0.0, 0.0, 0.03, 0.0, 0.0, 0.4, 0.4, 0.0, 0.4, 0.0, 0.03, 0.4, 0.4),
)
DENSE_MU = (1.0, 3.0, 2.0, 1.5, 7.0, 3.5, 1.5, 2.5, 4.0, 0.3, 1.0, 0.5, 2.0)
DENSE_SIGMA = 1.2
DENSE_NULL_RATES = (0.40, 0.05, 0.20, 0.20, 0.05, 0.22, 0.05, 0.05, 0.05, 0.40, 0.05, 0.38, 0.20)
# Standard deviation of each column's per-value effect on the logit: a few strong columns, many weak.
CAT_EFFECT_SD = (
    *(0.3, 0.1, 0.3, 0.1, 0.1, 0.1, 0.3, 0.1, 0.1, 0.3, 0.1, 0.1, 0.1),
    *(0.1, 0.3, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.3, 0.1, 0.1),
)
DENSE_WEIGHT = (0.3, 0.1, 0.2, 0.1, 0.25, 0.1, 0.3, 0.1, 0.15, 0.1, 0.3, 0.1, 0.2)
# The Criteo Terabyte tables' bucket counts (TorchRec's and TorchEasyRec's num_buckets of cat_0..cat_25):
# the ids of TorchEasyRec's criteo_terabyte_*_hashed_v1 tables are below them, as its FG_NONE configs need.
TERABYTE_BUCKETS = (
    *(40_000_000, 39_060, 17_295, 7_424, 20_265, 3, 7_122, 1_543, 63, 40_000_000, 3_067_956, 405_282, 10),
    *(2_209, 11_938, 155, 4, 976, 14, 40_000_000, 40_000_000, 40_000_000, 590_152, 12_973, 108, 36),
)
PAIR_EFFECT_SD = 0.4
PAIRS = ((1, 13), (5, 10))  # 0-based column indices: (C2, C14), (C6, C11)
PAIR_RANK = 4
FM_RANK = 4
FM_EFFECT_SD = 0.57  # about sqrt(2) * PAIR_EFFECT_SD: the two pairs' total
TARGET_POSITIVE_RATE = 0.25
_TAG = 0xC817E0


@dataclass
class CriteoModel:
    """The vocabularies, samplers and effects of one seed."""

    vocab: list[pa.Array]  # 8-hex-char strings per value index, per categorical column
    samplers: list[ZipfSampler]
    cat_effect: list[np.ndarray]
    dense_weight: np.ndarray
    dense_missing_effect: np.ndarray
    pair_factors: list[tuple[np.ndarray, np.ndarray]]  # per pair: (card_a, PAIR_RANK), (card_b, PAIR_RANK)
    base: float = 0.0
    pairs: bool = True  # False: no pair effects (first-order data, what a wide part plus an MLP fits)
    fm_factors: list[np.ndarray] | None = None  # pairs=2: one (card, FM_RANK) latent table per column


def hex_strings(values: np.ndarray) -> pa.Array:
    """uint32 ``values`` as lowercase 8-hex-char strings, built without a Python loop.

    Example::

        >>> hex_strings(np.array([255, 0xDEADBEEF], dtype=np.uint32)).to_pylist()
        ['000000ff', 'deadbeef']
    """
    digits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    shifts = np.arange(28, -1, -4, dtype=np.uint32)
    chars = digits[(values.astype(np.uint32)[:, None] >> shifts) & 0xF]
    offsets = np.arange(0, 8 * values.size + 1, 8, dtype=np.int32)
    return pa.StringArray.from_buffers(values.size, pa.py_buffer(offsets), pa.py_buffer(chars.tobytes()))


def cardinalities(max_vocab: int | None = None) -> tuple[int, ...]:
    """Each categorical column's vocabulary size, capped at ``max_vocab`` when given."""
    if max_vocab is not None and max_vocab < 2:
        raise ValueError(f"synthetic criteo: max_vocab must be >= 2, got {max_vocab}")
    return tuple(min(c, max_vocab) if max_vocab else c for c in CARDINALITIES)


def build_model(seed: int, max_vocab: int | None = None, pairs: int | bool = True) -> CriteoModel:
    """Draw vocabularies and effects for ``seed`` and calibrate the intercept.

    Args:
        seed (int): random seed.
        max_vocab (int | None): caps every column's vocabulary (default: :data:`CARDINALITIES`,
            up to 100k values); a smaller vocabulary gives every value more impressions per row.
        pairs (int | bool): 1 adds the two pair effects (default); 0 leaves only first-order effects;
            2 adds a factorization machine's pair effects over every pair of columns instead (the same
            first-order draws either way, the intercept recalibrated).
    """
    rng = np.random.default_rng([seed, _TAG, 1 << 40])
    vocab, samplers, effects = [], [], []
    for card, sd in zip(cardinalities(max_vocab), CAT_EFFECT_SD):
        salt = np.uint64(rng.integers(0, 1 << 32))
        # (i * odd + salt) mod 2^32 is a bijection, so the card strings are distinct.
        hashed = (np.arange(card, dtype=np.uint64) * np.uint64(2_654_435_761) + salt) % np.uint64(1 << 32)
        vocab.append(hex_strings(hashed))
        samplers.append(ZipfSampler(card, 1.1 if card > 1000 else 0.8))
        effects.append(rng.normal(0.0, sd, card))
    model = CriteoModel(
        vocab=vocab,
        samplers=samplers,
        cat_effect=effects,
        dense_weight=np.array(DENSE_WEIGHT) * rng.choice([-1.0, 1.0], len(DENSE_WEIGHT)),
        dense_missing_effect=rng.normal(0.0, 0.15, len(DENSE_MU)),
        # <u, v> of two independent N(0, s²/sqrt(k)) vectors of k dims has standard deviation s.
        pair_factors=[
            tuple(
                rng.normal(0.0, PAIR_EFFECT_SD**0.5 / PAIR_RANK**0.25, (len(effects[c]), PAIR_RANK))
                for c in pair
            )
            for pair in PAIRS
        ],
    )
    model.pairs = int(pairs) == 1
    if int(pairs) == 2:
        # A stream of its own, so the other draws are those of pairs=0/1. Each of the C(26, 2) = 325 pair
        # products of N(0, s^2) vectors of k dims has variance k s^4: s makes their sum's sd FM_EFFECT_SD.
        fm_rng = np.random.default_rng([seed, _TAG, (1 << 40) + 2])
        pairs_n = len(effects) * (len(effects) - 1) // 2
        s = (FM_EFFECT_SD**2 / (pairs_n * FM_RANK)) ** 0.25
        model.fm_factors = [fm_rng.normal(0.0, s, (len(e), FM_RANK)) for e in effects]
    calib = _draw(model, np.random.default_rng([seed, _TAG, (1 << 40) + 1]), 50_000)
    model.base = calibrate_base(calib["logit"], TARGET_POSITIVE_RATE)
    return model


def _draw(model: CriteoModel, rng: np.random.Generator, n: int) -> dict[str, object]:
    logit = np.zeros(n)
    dense, dense_null = [], []
    for j, mu in enumerate(DENSE_MU):
        x = rng.normal(mu, DENSE_SIGMA, n)
        values = np.maximum(np.floor(np.exp(x)) - 1, 0).astype(np.int64)
        if j == 1:  # I2 has a few small negative values (>= -2, so the configs' log(x+3) stays defined)
            values = np.where(rng.random(n) < 0.08, rng.integers(-2, 0, n), values)
        null = rng.random(n) < DENSE_NULL_RATES[j]
        z = (np.log1p(np.maximum(values, 0)) - mu) / DENSE_SIGMA
        logit += np.where(null, model.dense_missing_effect[j], model.dense_weight[j] * z)
        dense.append(values)
        dense_null.append(null)
    cats, cat_null = [], []
    for c, sampler in enumerate(model.samplers):
        idx = sampler.sample(rng, n)
        null = rng.random(n) < CAT_NULL_RATES[c]
        logit += np.where(null, 0.0, model.cat_effect[c][idx])
        cats.append(idx)
        cat_null.append(null)
    for (a, b), (u, v) in zip(PAIRS, model.pair_factors):
        if not model.pairs:
            break
        effect = np.einsum("nk,nk->n", u[cats[a]], v[cats[b]])
        logit += np.where(cat_null[a] | cat_null[b], 0.0, effect)
    if model.fm_factors is not None:  # sum over pairs = ((sum of vectors)^2 - sum of squares) / 2, nulls out
        vecs = [np.where(cat_null[c][:, None], 0.0, w[cats[c]]) for c, w in enumerate(model.fm_factors)]
        total = np.sum(vecs, axis=0)
        logit += 0.5 * ((total**2).sum(1) - sum((v**2).sum(1) for v in vecs))
    return {"logit": logit, "dense": dense, "dense_null": dense_null, "cats": cats, "cat_null": cat_null}


def make_chunk(
    model: CriteoModel, seed: int, chunk: int | tuple[int, ...], n: int, hashed: bool = False
) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """Rows of chunk ``chunk`` (deterministic for ``seed``; a tuple names a stream of its own, e.g. a
    day's chunk): the table, its labels and true probabilities.

    Args:
        hashed (bool): TorchEasyRec's layout (its examples read ``criteo_terabyte_*_hashed_v1``:
            ``int_0..int_12`` and ``cat_0..cat_25``, each categorical already an integer id, which its
            configs map with ``num_buckets`` or, pre-encoded (FG_NONE), use as rows): ``cat_k`` is the
            value's index in column ``k``'s vocabulary hashed into the Terabyte table's bucket count
            (``index % TERABYTE_BUCKETS[k]``: values of a column with more values than buckets collide, as
            in those tables), so every id is a valid row of TorchEasyRec's tables. The same rows and click
            model as the Kaggle layout ``I1..I13``/``C1..C26``.
    """
    rng = np.random.default_rng([seed, _TAG, *(chunk if isinstance(chunk, tuple) else (chunk,))])
    d = _draw(model, rng, n)
    prob = sigmoid(model.base + d["logit"])
    label = (rng.random(n) < prob).astype(np.int64)
    columns: dict[str, pa.Array] = {"label": pa.array(label)}
    for j, (values, null) in enumerate(zip(d["dense"], d["dense_null"])):
        columns[f"int_{j}" if hashed else f"I{j + 1}"] = pa.array(values, mask=null)
    for c, (idx, null) in enumerate(zip(d["cats"], d["cat_null"])):
        if hashed:
            columns[f"cat_{c}"] = pa.array((idx % TERABYTE_BUCKETS[c]).astype(np.int64), mask=null)
        else:
            columns[f"C{c + 1}"] = model.vocab[c].take(pa.array(idx, mask=null))
    columns["true_prob"] = pa.array(prob)
    return pa.table(columns), label.astype(np.int8), prob.astype(np.float32)
