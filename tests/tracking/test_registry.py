"""Registry: versions from a logged folder, int version numbers, tags, aliases, listing."""

from __future__ import annotations

import json
import math

import pytest

from recpipe.tracking import (
    eval_version_tags,
    get_version,
    get_version_by_alias,
    list_models,
    log_model_dir,
    register_version,
    set_alias,
    start_or_resume_run,
)
from recpipe.tracking.registry import delete_alias, normalize_version


def test_normalize_version():
    assert normalize_version("3") == 3 and normalize_version(3) == 3
    for bad in ("x", "0", -1):
        with pytest.raises(ValueError):
            normalize_version(bad)


def test_register_folder_tags_and_aliases(store_uri, unique, tmp_path):
    name = f"din-{unique}"
    run_id = start_or_resume_run(store_uri, f"reg-{unique}")
    export = tmp_path / "export"
    export.mkdir()
    (export / "manifest.json").write_text('{"backend": "jit"}')
    log_model_dir(run_id, export, "model")
    assert list_models(store_uri, name) == [] and get_version_by_alias(store_uri, name, "champion") is None
    tags = eval_version_tags(0.7123, float("nan"), 0.41, True, ["PASS min_auc: ..."], "sha256:abc")
    v1 = register_version(store_uri, name, run_id, "model", tags)
    v2 = register_version(store_uri, name, run_id, f"runs:/{run_id}/model", {"auc": "0.6"})
    assert (v1, v2) == (1, 2) and all(type(v) is int for v in (v1, v2))
    info = get_version(store_uri, name, "1")
    assert info["version"] == 1 and info["run_id"] == run_id and info["source"].endswith("/model")
    m = info["metrics"]
    assert (m["auc"], m["logloss"]) == (0.7123, 0.41) and math.isnan(m["gauc"])
    assert info["gate_passed"] is True and json.loads(info["tags"]["gate_reasons"]) == ["PASS min_auc: ..."]
    assert info["tags"]["data_digest"] == "sha256:abc"
    set_alias(store_uri, name, "challenger", v2)
    set_alias(store_uri, name, "champion", "1")
    champ = get_version_by_alias(store_uri, name, "champion")
    assert champ["version"] == 1 and champ["aliases"] == ["champion"]
    listed = list_models(store_uri, name)
    assert [(d["version"], d["aliases"], d["gate_passed"]) for d in listed] == [
        (1, ["champion"], True),
        (2, ["challenger"], None),
    ]
    delete_alias(store_uri, name, "challenger")
    delete_alias(store_uri, name, "challenger")  # already gone: fine
    assert get_version_by_alias(store_uri, name, "challenger") is None
    with pytest.raises(FileNotFoundError):
        register_version(store_uri, name, run_id, "no/such/path")
