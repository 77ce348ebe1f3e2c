"""register, for a retrieval export (``export.json`` of ``kind: retrieval``): its sealed folders (user tower,
item embeddings, FAISS index) logged to the run as one artifact folder and registered as a new version with
alias ``challenger``; recall@K, the gate and the ANN index's recall go on the version as tags.

Not a pyfunc yet: a served retrieval model (raw user rows → top-K item ids) is later work, so the version's
source is the export folder itself, which :func:`recpipe.export.retrieval.load_user_tower` and friends read
(verified). :func:`recpipe.stages.register.run` hands a retrieval report here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recpipe.runlog import RunLog

RETRIEVAL_SERVING = "retrieval"


def check_retrieval_export(exported_dir: str | Path) -> tuple[Path, dict[str, Any]]:
    """The current version folder of a retrieval export and its pointer, every part verified.

    Raises:
        ValueError: the folder is not a retrieval export.
        ArtifactError: a part fails verification (named).
    """
    from recpipe.export.layout import read_pointer, version_folder
    from recpipe.export.retriever import verify_retrieval_export

    pointer = read_pointer(exported_dir)
    if pointer is None or pointer.get("kind") != "retrieval":
        raise ValueError(f"{exported_dir} is not a retrieval export (its export.json has no kind: retrieval)")
    folder = version_folder(exported_dir, pointer["version"])
    verify_retrieval_export(folder)  # a version folder describes itself with the same export.json
    return folder, pointer


def version_tags(report: dict[str, Any], pointer: dict[str, Any], data_digest: str) -> dict[str, str]:
    """The version tags of a retrieval candidate: ``recall_at_<k>`` / ``hit_rate_at_<k>`` (what the next
    evaluation reads when it cannot re-score this version), the gate, the export's checks."""
    from recpipe.tracking.registry import TAG_DATA_DIGEST, TAG_GATE_PASSED, TAG_GATE_REASONS

    cand, gate = report["candidate"], report["gate"]
    tags = {k: repr(float(v)) for k, v in cand.items() if k.startswith(("recall_at_", "hit_rate_at_"))}
    ann = (pointer.get("index") or {}).get("ann") or {}
    tags.update(
        {
            TAG_GATE_PASSED: "true" if gate["passed"] else "false",
            TAG_GATE_REASONS: json.dumps(list(gate["reasons"])),
            TAG_DATA_DIGEST: data_digest,
            "gate_k": str(gate["k"]),
            "champion_source": gate.get("champion_source", "none"),
            "serving_backend": RETRIEVAL_SERVING,
            "backends": ",".join(sorted(pointer.get("backends", {}))),
            "parity.user_tower": f"max_abs_diff {pointer['user_tower_parity']['max_abs_diff']:.3g}",
            "items": str(pointer.get("items")),
            "ann_index": ann.get("kind") or "none",
        }
    )
    if ann.get("kind"):
        tags["ann_recall_vs_exact"] = repr(float(ann["recall_vs_exact"]))
    return tags


def register_retrieval(
    exported_dir: str,
    report: dict[str, Any],
    model_name: str,
    tracking_uri: str,
    data_digest: str | None,
    log: RunLog,
    artifact: str,
) -> tuple[int, str]:
    """Log ``exported_dir``'s current version to ``log``'s run as ``artifact`` and register it (alias
    ``challenger``); returns ``(version, model URI)``."""
    from recpipe import tracking

    folder, pointer = check_retrieval_export(exported_dir)
    run_id = str(log.run_id)
    model_uri = tracking.log_model_dir(run_id, folder, artifact, uri=tracking_uri)
    tags = version_tags(report, pointer, data_digest or report.get("data_digest") or "unknown")
    tags.update(tracking.chain_tags(tracking_uri, model_name, log.tags(), run_id))
    version = tracking.register_version(tracking_uri, model_name, run_id, artifact, tags=tags)
    tracking.set_alias(tracking_uri, model_name, tracking.ALIAS_CHALLENGER, version)
    log.set_tags(
        {"registered.model": model_name, "registered.version": version, "registered.model_uri": model_uri}
    )
    return version, model_uri
