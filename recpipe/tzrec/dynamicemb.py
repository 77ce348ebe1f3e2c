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

``frequency_admission_strategy`` stays refused: dynamicemb counts each id's sightings across steps in a counter
table and gives it a row once the count reaches ``threshold`` (until then it reads the strategy's initializer,
zeros); TorchRec's nearest hook, ``MCHEvictionPolicy``'s ``threshold_filtering_func``
(torchrec/modules/mc_modules.py ``_coalesce_history``), filters by the counts of one eviction interval only, so
an id seen once a step is never admitted there and would be at once here — not the same table.
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
    "frequency_admission_strategy": "frequency admission (an id gets a row once its sightings, counted across "
    "steps, reach threshold); recpipe's zch admits every id, and TorchRec's threshold filter counts within one "
    "eviction interval",
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
    found.note(dp, DIFFERENCES)
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
