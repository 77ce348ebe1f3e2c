"""docs/deploy.md names only paths, targets and settings that exist (a documented command that cannot work
is a bug)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "deploy.md").read_text()


def test_every_path_the_doc_names_exists():
    paths = set(
        re.findall(
            r"(?<![\w/.])((?:tests|manifests|images|scripts|configs|requirements|docs)/[\w./-]*[\w/])", DOC
        )
    )
    assert len(paths) > 15
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing


def test_make_targets_and_script_settings_exist():
    makefile = (ROOT / "Makefile").read_text()
    for target in re.findall(r"make ([a-z][\w-]+)", DOC):
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target}"
    script = (ROOT / "scripts" / "local_run.sh").read_text()
    for setting in (
        "KIND_CLUSTER",
        "KFP_PORT",
        "MLFLOW_PORT",
        "LOCAL_RUN_ROWS",
        "LOCAL_RUN_CONFIG",
        "LOCAL_RUN_TIMEOUT",
        "LOCAL_RUN_CUDA_IMAGE",
    ):
        assert setting in DOC and f"${{{setting}:-" in script, setting


def test_the_doc_says_what_was_not_exercised():
    assert "no Docker engine" in DOC and "no kind" in DOC
    assert "never built" in DOC and "never applied" in DOC and "never ran" in DOC
