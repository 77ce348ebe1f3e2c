"""TorchEasyRec's example configs, written as they ship (``{PROJECT}`` paths, no ``default_value`` in the
history, ``int_k``/``cat_k`` with ``num_buckets``, FG_NONE pre-encoded input with WIDE groups), import with no
hand edit and run through the stages on generated data with ``on_bad_row: error``: ingest, train (torchrun,
DistributedModelParallel), evaluate, export with parity. Only ``--set``-style overrides make the run short;
the config is the imported one."""

from __future__ import annotations

from pathlib import Path

import pytest
from tzrec_fixtures import DIN_CONFIG, tzrec_deepfm, tzrec_dlrm, tzrec_multi_tower

from recpipe.config import load_config
from recpipe.features.build import build_feature_spec
from recpipe.pipeline.params import synthetic_source_for
from recpipe.stages import evaluate, export, ingest, train
from recpipe.train.memory import GIB, DeviceMemory, OversizeError, check_fits, embedding_memory_report
from recpipe.tzrec import import_tzrec, import_tzrec_file

SHORT = {"train.max_steps": 4, "data.batch_size": 64, "data.num_workers": 0, "train.log_every_steps": 2}


def _write(imported, root: Path) -> str:
    root.mkdir(parents=True, exist_ok=True)
    (root / "imported.yaml").write_text(imported.to_yaml())
    return str(root / "imported.yaml")


def _stages(config: str, root: Path) -> tuple[str, float, dict]:
    cfg = load_config(config)
    assert cfg.data.on_bad_row == "error"
    source = synthetic_source_for(cfg, 1500)  # the generated data whose columns the config reads
    data = ingest.run(source, root / "data", cfg.data.label, split=cfg.data.split, csv=cfg.csv_options())
    trained = train.run(config, data.train_dir, data.eval_dir, str(root / "train"), overrides=SHORT)
    report = evaluate.run(trained.checkpoint_dir, data.eval_dir, str(root / "eval.json"))
    assert report.rows == data.eval_rows > 0 and 0.0 <= report.auc <= 1.0
    exported = export.run(trained.checkpoint_dir, "jit,onnx,rtp", str(root / "export"), data.eval_dir)
    assert exported.ok
    return source, report.auc, exported.backends


@pytest.mark.slow
def test_multi_tower_din_taobao_as_shipped_runs_on_synthetic_taobao(tmp_path):
    """An empty brand in the history (``782577\\x037511\\x03``) is id 0 as in TorchEasyRec, so no row is bad."""
    config = _write(import_tzrec_file(DIN_CONFIG), tmp_path)
    source, _, backends = _stages(config, tmp_path)
    assert source == "synthetic:taobao?rows=1500"
    assert all(b.parity.passed for b in backends.values()) and sorted(backends) == ["jit", "onnx", "rtp"]


@pytest.mark.slow
def test_dlrm_criteo_as_shipped_runs_on_synthetic_criteo(tmp_path):
    """TorchEasyRec's hashed Criteo tables hold int_k and integer cat_k ids: the generator's hashed layout.
    The 40M-bucket tables are capped (the config's shape otherwise); they get their own test below."""
    config = _write(import_tzrec(tzrec_dlrm(max_buckets=40_000)), tmp_path)
    source, _, backends = _stages(config, tmp_path)
    assert source == "synthetic:criteo?rows=1500&hashed=1"
    assert all(b.parity.passed for b in backends.values()) and sorted(backends) == ["jit", "onnx", "rtp"]


def test_dlrm_criteo_full_size_needs_24_gib_and_is_refused_on_a_16_gib_device():
    """The shipped sizes: five 40M-bucket tables, 204M rows, 24.3 GiB with Adagrad's state."""
    cfg = import_tzrec(tzrec_dlrm()).config
    report = embedding_memory_report(build_feature_spec(cfg), cfg.train.sparse_optimizer.type)
    assert report.total_rows == 204_184_588 and round(report.total_bytes / GIB, 1) == 24.3
    with pytest.raises(OversizeError, match=r"need 24.3 GiB but the planned devices hold 16.0 GiB"):
        check_fits(report, DeviceMemory(16 * GIB, 1, "1 GPU(s) × 16.0 GiB HBM (test)"))


@pytest.mark.slow
def test_multi_tower_taobao_runs_on_synthetic_taobao(tmp_path):
    """TorchEasyRec's MultiTower: deep towers per group and a final MLP (MultiTowerDIN with no DIN tower)."""
    imported = import_tzrec(tzrec_multi_tower())
    assert imported.config.model.type == "multi_tower" and len(imported.config.model.towers) == 2
    source, _, backends = _stages(_write(imported, tmp_path), tmp_path)
    assert source == "synthetic:taobao?rows=1500"
    assert all(b.parity.passed for b in backends.values()) and sorted(backends) == ["jit", "onnx", "rtp"]


@pytest.mark.slow
def test_deepfm_criteo_as_shipped_runs_on_pre_encoded_synthetic_criteo(tmp_path):
    """FG_NONE: the hashed layout's ``cat_k`` are rows of TorchEasyRec's tables (ids below the Terabyte
    bucket counts), used as they are and range-checked; ``int_k`` are used as they are. Tables are capped at
    100,000 rows (every generated id fits; the shipped 40M-row tables need 30.4 GiB, tested apart)."""
    imported = import_tzrec(tzrec_deepfm(max_buckets=100_000))
    assert imported.config.data.fg_encoded and imported.config.model.type == "deepfm"
    source, _, backends = _stages(_write(imported, tmp_path), tmp_path)
    assert source == "synthetic:criteo?rows=1500&hashed=1"
    assert all(b.parity.passed for b in backends.values()) and sorted(backends) == ["jit", "onnx", "rtp"]


@pytest.mark.slow
def test_wide_and_deep_on_pre_encoded_synthetic_criteo(tmp_path):
    """TorchEasyRec's WideAndDeep over the same constructs: a WIDE group and a deep group of counts and ids."""
    sparse = " ".join(f'feature_names: "cat_{i}"' for i in range(26))
    dense = " ".join(f'feature_names: "int_{i}"' for i in range(13))
    groups = (
        f'feature_groups {{ group_name: "wide" {sparse} group_type: WIDE }}\n'
        f'feature_groups {{ group_name: "deep" {dense} {sparse} group_type: DEEP }}'
    )
    model = "wide_and_deep { deep { hidden_units: [64, 32] } final { hidden_units: [8] } }"
    imported = import_tzrec(tzrec_deepfm(max_buckets=100_000, model=model, groups=groups))
    source, _, backends = _stages(_write(imported, tmp_path), tmp_path)
    assert source == "synthetic:criteo?rows=1500&hashed=1"
    assert all(b.parity.passed for b in backends.values()) and sorted(backends) == ["jit", "onnx", "rtp"]
