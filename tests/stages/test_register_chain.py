"""The register stage writes the chain: two days of a tiny DIN export registered through ``register.run`` into
the pipeline's run, whose tags are set as ingest and train set them; the second version names the first as
its parent and holds both days' partitions, and ``promote.lineage`` walks them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recpipe import tracking
from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.launch.worker import train
from recpipe.stages import evaluate, export, ingest, promote, register

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "pipelines" / "data" / "tiny_din.yaml"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny DIN trained for 10 steps in this process, evaluated and exported (rtp)."""
    root = tmp_path_factory.mktemp("chain")
    data = load_config(TINY).data
    ingest.run("synthetic:taobao?rows=3000&seed=3", root / "data", data.label, data.split,
               oracle_column=data.oracle_column)  # fmt: skip
    cfg = load_config(TINY, {"train.max_steps": 10})
    train(
        cfg, build_feature_spec(cfg), str(root / "data" / "train"), str(root / "data" / "eval"), root / "ckpt"
    )
    report = evaluate.run(str(root / "ckpt"), str(root / "data" / "eval"), str(root / "report.json"))
    export.run(str(root / "ckpt"), "rtp", str(root / "export"), data_uri=str(root / "data" / "eval"))
    return root / "export", report.report_path


def test_registered_versions_carry_the_chain_from_the_run_tags(exported, tmp_path):
    folder, report = exported
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    versions = []
    for day, parent in ((1, None), (2, 1)):
        log = tracking.open_run_log(tracking.start_or_resume_run(uri, "daily"), uri)
        part = f"dt=2026010{day}"
        log.set_tags({"data_partitions": part, "data_partition_digests": json.dumps({part: f"sha256:{day}"}),
                      "eval_partitions": f"dt=2026010{day + 1}"})  # fmt: skip
        if parent is not None:
            log.set_tags({"init_from": "models:/ctr@champion", "init_from_version": str(parent)})
        versions.append(register.run(str(folder), report, "ctr", uri, log=log).version)
    tags = tracking.get_version(uri, "ctr", versions[1])["tags"]
    assert (tags["parent_version"], tags["partitions"], tags["partitions_added"]) == (
        "1",
        "dt=20260101,dt=20260102",
        "dt=20260102",
    )
    assert json.loads(tags["partition_digests"]) == {"dt=20260101": "sha256:1", "dt=20260102": "sha256:2"}
    chain = promote.lineage("ctr", uri)
    assert [(e["version"], e["parent"], e["eval_partitions"]) for e in chain["entries"]] == [
        (2, {"model": "ctr", "version": 1}, ["dt=20260103"]),
        (1, None, ["dt=20260102"]),
    ]
