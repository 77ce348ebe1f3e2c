"""TorchEasyRec's ``dynamicemb {}`` (feature.proto ``DynamicEmbedding``, docs/source/feature/dynamicemb.md) as a
recpipe zch table: each field that has a faithful counterpart maps, each other one is refused at its line.

NVIDIA dynamicemb keys a GPU hash table by the id's value (no collisions) up to ``max_capacity`` rows and, when
full, evicts by a score (``score_strategy``); TorchEasyRec builds it in ``build_dynamicemb_constraints``
(tzrec/utils/dynamicemb_util.py) with ``num_embeddings = max_capacity`` (``IdFeature.num_embeddings``) and FG's
``hash_bucket_size`` at 2**63 - 1 (``_fg_json``, tzrec/features/id_feature.py), as for ``zch {}``. recpipe's zch
table (TorchRec's ``MCHManagedCollisionModule``) is the same kind of table: ``max_capacity`` → ``zch_size``,
``STEP`` (evict the id updated longest ago) → ``lru`` (score 1 / steps since seen: the same order), ``LFU`` →
``lfu``; dynamicemb admits at once, so the admission and eviction run every step (``zch_eviction_interval: 1``).
Its ``initializer_args`` become the table's ``init`` (recpipe/tzrec/table_init.py; the default,
``U(±1/sqrt(max_capacity))``, is recpipe's default table init, TorchRec's), which an evicted row is re-drawn from
as dynamicemb draws a new id's row.

``frequency_admission_strategy`` → ``zch_admission``: dynamicemb counts each id's sightings across training
steps in a counter (``KVCounter``, ``counter_capacity`` ids, default ``max_capacity``) and inserts the id once
its count reaches ``threshold``; until then it reads the strategy's ``initializer_args``, built as an evaluation
initializer (``_build_dynamicemb_initializer(..., is_eval=True)``, tzrec/utils/dynamicemb_util.py: mode unset is
CONSTANT, ``value`` 0). recpipe's counter (recpipe/models/blocks/zch_admission.py) does the same in the zch
table's remapping module, and every id without a row reads the constant, at evaluation too, which is
dynamicemb's ``eval_initializer_args`` default (zeros): so only CONSTANT, value 0 maps (another value would read
otherwise at evaluation), and another mode (a random vector per lookup) is refused. ``counter_bucket_capacity``
is the counter's storage (a note); when the counter is full recpipe forgets the lowest counts (dynamicemb evicts
within the key's bucket), a note at ``counter_capacity``.
"""

from __future__ import annotations

from typing import Any

from recpipe.tzrec.problems import Findings
from recpipe.tzrec.table_init import map_initializer_args

# Said at the dynamicemb line of every import: what the zch table does otherwise (the model can score new ids
# differently), so nobody takes the mapping for an exact one.
DIFFERENCES = (
    "imported as a recpipe zch table, which differs in two ways: an id with no row is looked up in the table's "
    "trained spare row (dynamicemb: a zero vector at evaluation), and a new id gets its row at the step's "
    "eviction, across the whole table (dynamicemb: at once, evicting within its hash bucket)"
)
# The same with frequency admission, whose constant (zeros) every id without a row reads, as dynamicemb's do.
ADMISSION_DIFFERENCES = (
    "imported as a recpipe zch table with frequency admission (zch_admission): an id with no row reads zeros "
    "(the admission's constant), as in dynamicemb; it differs in one way: an id at the threshold gets its row at "
    "the step's eviction, across the whole table, and none if the full table keeps ids of higher score "
    "(dynamicemb: at once, evicting within its hash bucket)"
)
_ADMISSION_IGNORED = {
    "counter_bucket_capacity": "the admission counter's bucket size: storage, not the model",
}
# dynamicemb's score strategies recpipe's eviction policies reproduce (see the module docstring).
SCORE_POLICIES = {"STEP": "lru", "LFU": "lfu"}
_NO_POLICY = {
    "TIMESTAMP": "wall-clock scores (the order of ids updated in one step, and across ranks, is not the step's)",
    "NO_EVICTION": "a full table that admits no new id (recpipe's zch tables always evict)",
    "CUSTOMIZED": "scores the caller sets",
}
_REFUSED = {
    "eval_initializer_args": "an evaluation initializer for ids without a row; recpipe looks them up in the "
    "table's spare row",
    "bucket_capacity": "the hash table's bucket size, which decides which ids a full table evicts (per "
    "bucket); recpipe's zch evicts over the whole table",
    "init_table": "rows loaded from a table before training (TorchEasyRec's create_dynamicemb_init_ckpt); "
    "warm-start with train.init_from instead",
}
_IGNORED = {
    "init_capacity_per_rank": "the hash table's starting size, grown up to max_capacity: storage, not the model",
    "cache_load_factor": "the share of rows cached in GPU memory: storage, not the model",
}


def map_dynamicemb(cfg: Any, path: str, found: Findings, out: dict[str, Any]) -> None:
    """``cfg.dynamicemb`` into ``out``'s zch fields (the bucket setting, as zch's, is the caller's)."""
    d, dp = cfg.dynamicemb, f"{path}.dynamicemb"
    out.update(zch=True, zch_size=d.max_capacity, zch_eviction_interval=1)
    admission = d.HasField("frequency_admission_strategy")
    found.note(dp, ADMISSION_DIFFERENCES if admission else DIFFERENCES)
    if admission:
        _map_admission(d.frequency_admission_strategy, f"{dp}.frequency_admission_strategy", found, out)
    policy = SCORE_POLICIES.get(d.score_strategy)
    if policy is None:
        why = _NO_POLICY.get(d.score_strategy, "not one of dynamicemb's strategies")
        found.problem(
            f"{dp}.score_strategy",
            f"dynamicemb score_strategy {d.score_strategy!r} ({why}) has no recpipe eviction policy; "
            f"{' / '.join(f'{k} → {v}' for k, v in SCORE_POLICIES.items())} map",
        )
    else:
        out["zch_eviction_policy"] = policy
    if d.HasField("initializer_args"):
        init = map_initializer_args(d.initializer_args, f"{dp}.initializer_args", found)
        if init is not None:
            out["init"] = init
    for name, why in _REFUSED.items():
        if d.HasField(name):
            found.problem(f"{dp}.{name}", f"dynamicemb {name} has no recpipe counterpart: {why}")
    for name, why in _IGNORED.items():
        if d.HasField(name):
            found.note(f"{dp}.{name}", f"ignored: {why}")


def _map_admission(a: Any, path: str, found: Findings, out: dict[str, Any]) -> None:
    """``frequency_admission_strategy`` into ``out["zch_admission"]`` (see the module docstring)."""
    admission: dict[str, Any] = {"threshold": int(a.threshold)}
    if a.threshold < 1:
        found.problem(f"{path}.threshold", f"frequency admission threshold must be >= 1, got {a.threshold}")
        return
    if a.HasField("counter_capacity"):
        if a.counter_capacity < 1:
            found.problem(
                f"{path}.counter_capacity", f"counter_capacity must be >= 1, got {a.counter_capacity}"
            )
            return
        admission["counter_capacity"] = int(a.counter_capacity)
    found.note(
        f"{path}.counter_capacity" if a.HasField("counter_capacity") else path,
        "a full admission counter forgets the ids of lowest count (recpipe's rule; dynamicemb's KVCounter evicts "
        "within the key's bucket), and its capacity is rounded up to whole ids per table row",
    )
    if a.HasField("initializer_args"):
        init, ip = a.initializer_args, f"{path}.initializer_args"
        mode = (
            init.mode if init.HasField("mode") else "CONSTANT"
        )  # TorchEasyRec builds it as an eval initializer
        if mode != "CONSTANT":
            found.problem(
                f"{ip}.mode",
                f"an admission initializer {mode!r} (a random vector for an id not yet admitted) has no recpipe "
                "counterpart: ids without a row read one constant",
            )
            return
        if init.value != 0.0:
            found.problem(
                f"{ip}.value",
                f"an admission constant {init.value} differs from dynamicemb's evaluation initializer (zeros), "
                "which its ids without a row read at evaluation; recpipe reads one constant for them in training "
                "and evaluation alike",
            )
            return
        for name in ("mean", "std_dev", "lower", "upper"):
            if init.HasField(name):
                found.note(f"{ip}.{name}", f"ignored: a CONSTANT initializer reads no {name}")
    for name, why in _ADMISSION_IGNORED.items():
        if a.HasField(name):
            found.note(f"{path}.{name}", f"ignored: {why}")
    out["zch_admission"] = admission
