"""Models with zero-collision (zch) features export to jit, aoti, onnx and rtp with parity: the frozen
remapping sends every key where the eager model sends it (ids never seen in training included), travels
in ``zch.safetensors`` next to the tables, and an inconsistent one is refused.

The DIN has ``adgroup_id`` as a zch table shared by the candidate and the history, the DLRM ``C1``; both
tables are far smaller than their id counts, so training fills them, evicts, and many held-out ids have
no row.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import save_file
from small_training import train_small
from torch import nn

from recpipe.batch import to_batch
from recpipe.config import RecpipeConfig, parse_config
from recpipe.data.synthetic import generate
from recpipe.export.api import export
from recpipe.export.layout import backend_folder
from recpipe.export.loaders import load_backend
from recpipe.export.manifest import MANIFEST_NAME, ArtifactError, sha256_file
from recpipe.export.remap import ZCH_FILE, ZCH_METADATA, ZchRemap
from recpipe.export.split import split_model
from recpipe.export.tables import SPARSE_META, write_tables
from recpipe.export.zch import zch_remaps
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.features.hashing import zch_key_py
from recpipe.features.spec import FeatureSpec, IdMapping
from recpipe.models.registry import build_model

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4
SPLIT_BACKENDS = ["jit", "onnx", "rtp"]
REMAP = "embeddings.mc_ec._managed_collision_collection._managed_collision_modules"
UNSEEN = [10**12 + 7, 10**12 + 8, 10**13 + 3]  # ids far outside the generated catalogue


@dataclass
class ZchTrained:
    model: nn.Module
    spec: FeatureSpec
    cfg: RecpipeConfig
    held_out: pa.Table
    clean: pa.Table
    zch_table: str

    def eager_logits(self, rows: pa.Table, model: nn.Module | None = None) -> np.ndarray:
        b = to_batch(FeatureGenerator(self.spec, with_labels=False)(rows), self.spec.sparse_keys())
        with torch.no_grad():
            return (model or self.model)(b.dense, b.sparse).numpy()


def zch_config(config: str, zch: dict[str, int], shrink: bool = False) -> dict:
    """``configs/<config>`` with ``zch: true`` and ``zch_size`` on the named features and sub-features;
    ``shrink`` cuts every other table above 1000 rows to 1% (small checkpoints)."""
    data = yaml.safe_load((ROOT / "configs" / config).read_text())
    for f in [*data["features"], *(s for g in data["features"] for s in g.get("sub_features", []))]:
        if f["name"] in zch:
            f.update(zch=True, zch_size=zch[f["name"]])
        elif shrink:
            for key in ("num_buckets", "hash_bucket_size"):
                if f.get(key, 0) > 1000:
                    f[key] //= 100
    return data


def _train(config: str, kind: str, zch: dict[str, int], tmp: Path) -> ZchTrained:
    """Like the session fixtures of conftest.py: 6 steps of Adam (dense) and SGD (tables)."""
    cfg = parse_config(zch_config(config, zch))
    small = train_small(cfg, kind, tmp)
    return ZchTrained(small.model, small.spec, cfg, small.held_out, small.clean, next(iter(zch)))


@pytest.fixture(scope="module")
def din_zch(tmp_path_factory) -> ZchTrained:
    # 300 rows for ~170 ads: full after training, ids evicted, held-out ads without a row
    return _train("din_taobao_small.yaml", "taobao", {"adgroup_id": 300}, tmp_path_factory.mktemp("din_zch"))


@pytest.fixture(scope="module")
def dlrm_zch(tmp_path_factory) -> ZchTrained:
    return _train("dlrm_criteo_small.yaml", "criteo", {"C1": 200}, tmp_path_factory.mktemp("dlrm_zch"))


@pytest.fixture(scope="module")
def din_zch_export(din_zch, tmp_path_factory):
    return din_zch, export(
        din_zch.model,
        din_zch.spec,
        din_zch.cfg,
        SPLIT_BACKENDS,
        tmp_path_factory.mktemp("x"),
        din_zch.held_out,
    )


@pytest.fixture(scope="module")
def dlrm_zch_export(dlrm_zch, tmp_path_factory):
    return dlrm_zch, export(
        dlrm_zch.model,
        dlrm_zch.spec,
        dlrm_zch.cfg,
        SPLIT_BACKENDS,
        tmp_path_factory.mktemp("x"),
        dlrm_zch.held_out,
    )


@pytest.fixture(params=["din", "dlrm"])
def zch_exported(request):
    return request.getfixturevalue(f"{request.param}_zch_export")


def _set_ids(rows: pa.Table, column: str, ids: list[int]) -> pa.Table:
    i = rows.schema.get_field_index(column)
    kind = rows.schema.field(i).type
    values = [str(x) for x in ids] if pa.types.is_string(kind) else ids
    return rows.set_column(i, rows.schema.field(i), pa.array(values, type=kind))


def _unseen_rows(trained: ZchTrained, n: int = 24, shift: int = 0) -> pa.Table:
    """Held-out rows whose zch ids (and, for DIN, every history item's ad) were never seen in training;
    ``shift`` rotates which unseen id each row gets."""
    rows = trained.clean.slice(0, n)
    column = trained.spec.feature(trained.zch_table).column
    rows = _set_ids(rows, column, [UNSEEN[(i + shift) % len(UNSEEN)] for i in range(n)])
    for s in trained.spec.sequences:
        at = s.sub_features.index(f"{s.name}__{trained.zch_table}")
        c = rows.schema.get_field_index(s.column)
        hist = []
        for text in rows.column(c).to_pylist():
            items = [it.split(s.sub_delimiter) for it in (text or "").split(s.delimiter) if it]
            for j, it in enumerate(items):
                it[at] = str(UNSEEN[(j + shift) % len(UNSEEN)] + 1000)
            hist.append(s.delimiter.join(s.sub_delimiter.join(it) for it in items))
        rows = rows.set_column(c, rows.schema.field(c), pa.array(hist, type=rows.schema.field(c).type))
    return rows


# ----------------------------------------------------------------------------------- parity
@pytest.mark.parametrize("backend", SPLIT_BACKENDS)
def test_zch_model_exports_with_parity(zch_exported, backend):
    trained, result = zch_exported
    r = result.backends[backend]
    assert r.status == "ok", r.reason
    assert r.parity.passed and r.parity.rows >= 1000
    assert 0.0 <= r.parity.max_abs_logit_diff <= TOL == r.parity.tolerance
    assert round(r.parity.auc_backend, 4) == round(r.parity.auc_eager, 4)
    folder = Path(r.folder)
    assert FeatureSpec.load(folder).digest() == trained.spec.digest()  # fg.json unchanged
    if backend != "jit":
        doc = json.loads((folder / SPARSE_META).read_text())
        assert doc["version"] == 2
        zch = {t["name"]: t["zch"] for t in doc["tables"] if t["zch"]}
        rows = trained.spec.tables()
        size = next(t.num_embeddings for t in rows if t.name == trained.zch_table)
        assert list(zch) == [trained.zch_table]
        assert zch[trained.zch_table] == {"rows": size, "keys": size - 1, "miss_ranges": 1}  # full table
        with safe_open(str(folder / ZCH_FILE), framework="pt") as fh:
            assert json.loads(fh.metadata()[ZCH_METADATA]) == zch
        assert ZCH_FILE in json.loads((folder / MANIFEST_NAME).read_text())["files"]


def test_frozen_remap_sends_keys_where_the_trained_module_does(din_zch):
    """Admitted keys to their rows, unseen keys to the spare last row: the module's eval-mode remap."""
    remap = zch_remaps(din_zch.model)["adgroup_id"]
    module = din_zch.model.get_submodule(f"{REMAP}.adgroup_id")
    assert remap.keys.numel() == 299 and remap.miss_rows.tolist() == [299]
    unseen = torch.tensor([zch_key_py(x) for x in UNSEEN])
    keys = torch.cat([remap.keys, unseen, remap.keys[:5] + 1])
    from torchrec.sparse.jagged_tensor import JaggedTensor

    want = module.remap({"adgroup_id": JaggedTensor(values=keys, lengths=torch.ones_like(keys))})
    assert torch.equal(remap(keys), want["adgroup_id"].values())
    assert remap(unseen).tolist() == [299] * 3


@pytest.mark.parametrize("backend", SPLIT_BACKENDS)
def test_unseen_ids_score_like_the_eager_model(zch_exported, backend):
    trained, result = zch_exported
    rows = _unseen_rows(trained)
    eager = trained.eager_logits(rows)
    scorer = load_backend(result.backends[backend].folder)
    assert np.abs(scorer.predict_raw(rows) - eager).max() <= TOL
    # every unseen id looks up the one spare row: the rows score the same whichever unseen ids they hold
    assert np.abs(scorer.predict_raw(_unseen_rows(trained, shift=1)) - eager).max() <= TOL
    # while the held-out ids, many of them admitted, score otherwise
    seen = trained.clean.slice(0, 24)
    assert np.abs(scorer.predict_raw(seen) - trained.eager_logits(seen)).max() <= TOL
    assert not np.allclose(trained.eager_logits(seen), eager, atol=1e-3)


def test_rtp_serves_zch_tables_without_torchrec(din_zch_export, tmp_path):
    trained, result = din_zch_export
    rows = pa.concat_tables([_unseen_rows(trained), trained.clean.slice(0, 40)])
    pq.write_table(rows.drop_columns([trained.spec.label]), tmp_path / "rows.parquet")
    server = (
        "import sys, numpy as np, pyarrow.parquet as pq\n"
        "from recpipe.export.rtp import RtpModel\n"
        "np.save(sys.argv[3], RtpModel(sys.argv[1]).predict_raw(pq.read_table(sys.argv[2])))\n"
        "assert not any(m.split('.')[0] in ('torchrec', 'fbgemm_gpu') for m in sys.modules)\n"
    )
    args = [result.backends["rtp"].folder, str(tmp_path / "rows.parquet"), str(tmp_path / "out.npy")]
    proc = subprocess.run([sys.executable, "-c", server, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert np.abs(np.load(tmp_path / "out.npy") - trained.eager_logits(rows)).max() <= TOL


def test_pre_encoded_zch_ids_export_and_serve_as_their_raw_ids(din_zch, tmp_path):
    """Read as pre-encoded ids (``data.fg_encoded``: an ``identity`` mapping, no table-range check), the zch
    table's ids key as the same raw ids do under FG: the trained DIN with its ``adgroup_id`` keys (candidate and
    history) so exports to rtp with parity, its fg.json records them, and the scorer gives raw rows, unseen ids
    included, the raw-mapped model's scores."""
    encoded = [
        dataclasses.replace(f, mapping=IdMapping("identity", f.mapping.size))
        if f.table == "adgroup_id"
        else f
        for f in din_zch.spec.sparse
    ]
    spec = dataclasses.replace(din_zch.spec, sparse=encoded)
    result = export(din_zch.model, spec, din_zch.cfg, ["rtp"], tmp_path, din_zch.held_out)
    r = result.backends["rtp"]
    assert r.status == "ok" and r.parity.passed and r.parity.max_abs_logit_diff <= TOL, r.reason
    served = FeatureSpec.load(r.folder).feature("click_50_seq__adgroup_id")
    assert served.mapping.kind == "identity" and served.zch
    rows = pa.concat_tables([_unseen_rows(din_zch), din_zch.clean.slice(0, 24)])
    assert np.abs(load_backend(r.folder).predict_raw(rows) - din_zch.eager_logits(rows)).max() <= TOL


def test_aoti_exports_a_zch_model_with_parity(din_zch, tmp_path):
    result = export(din_zch.model, din_zch.spec, din_zch.cfg, ["aoti"], tmp_path, din_zch.held_out)
    r = result.backends["aoti"]
    assert r.status == "ok" and r.parity.passed and r.parity.max_abs_logit_diff <= TOL
    rows = _unseen_rows(din_zch)
    assert np.abs(load_backend(r.folder).predict_raw(rows) - din_zch.eager_logits(rows)).max() <= TOL


# ------------------------------------------------------------------------- multi-rank remapping
def test_a_two_rank_remapping_sends_unseen_ids_to_their_ranks_row(din_zch, tmp_path):
    """Loaded from a 2-rank checkpoint, the model sends a key without a row to the spare row of the rank
    owning its half of the key space (149 below 2**62, 299 above); the export does the same."""
    model = build_model(din_zch.spec, din_zch.cfg.model)
    state = {k: v.clone() for k, v in din_zch.model.state_dict().items()}
    segments = torch.full_like(state[f"{REMAP}.adgroup_id._output_segments_tensor"], -1)
    segments[:3] = torch.tensor([0, 150, 300])
    state[f"{REMAP}.adgroup_id._output_segments_tensor"] = segments
    model.load_state_dict(state)
    model.eval()
    remap = zch_remaps(model)["adgroup_id"]
    assert remap.miss_rows.tolist() == [149, 299]
    assert remap.miss_key_starts.tolist() == [0, 2**62]
    low = next(x for x in range(10**12, 10**12 + 100) if zch_key_py(x) < 2**62)
    high = next(x for x in range(10**12, 10**12 + 100) if zch_key_py(x) >= 2**62)
    assert remap(torch.tensor([zch_key_py(low), zch_key_py(high)])).tolist() == [149, 299]

    result = export(model, din_zch.spec, din_zch.cfg, ["jit", "rtp"], tmp_path, din_zch.held_out)
    rows = din_zch.clean.slice(0, 2)
    col = rows.schema.get_field_index("adgroup_id")
    rows = rows.set_column(
        col, rows.schema.field(col), pa.array([low, high], type=rows.schema.field(col).type)
    )
    eager = din_zch.eager_logits(rows, model)
    for backend in ("jit", "rtp"):
        r = result.backends[backend]
        assert r.status == "ok" and r.parity.max_abs_logit_diff <= TOL, backend
        assert np.abs(load_backend(r.folder).predict_raw(rows) - eager).max() <= TOL, backend
    assert not np.allclose(eager, din_zch.eager_logits(rows))  # one-rank model: both to row 299


# ------------------------------------------------------------------------------ bad artifacts
def _copy(src: str, dst: Path) -> Path:
    shutil.copytree(src, dst, copy_function=os.link)
    return dst


def _rewrite_remap(folder: Path, change) -> None:
    """Rewrite ``zch.safetensors`` with ``change(tensors, metadata)`` applied and re-hash it in the
    manifest: an artifact written inconsistently, not one corrupted in transit."""
    path = folder / ZCH_FILE
    with safe_open(str(path), framework="pt") as fh:
        tensors = {k: fh.get_tensor(k) for k in fh.keys()}
        metadata = dict(fh.metadata())
    change(tensors, metadata)
    path.unlink()  # break the hard link
    save_file(tensors, str(path), metadata=metadata)
    manifest = json.loads((folder / MANIFEST_NAME).read_text())
    manifest["files"][ZCH_FILE]["sha256"] = sha256_file(path)
    (folder / MANIFEST_NAME).unlink()
    (folder / MANIFEST_NAME).write_text(json.dumps(manifest))


def _drop_a_key(tensors: dict, metadata: dict) -> None:
    tensors["adgroup_id/keys"] = tensors["adgroup_id/keys"][1:].clone()
    tensors["adgroup_id/rows"] = tensors["adgroup_id/rows"][1:].clone()


def _row_outside_the_table(tensors: dict, metadata: dict) -> None:
    tensors["adgroup_id/rows"][3] = 300


def _unsorted_keys(tensors: dict, metadata: dict) -> None:
    tensors["adgroup_id/keys"] = tensors["adgroup_id/keys"].flip(0).clone()


def _sizes_in_both_places(tensors: dict, metadata: dict) -> None:
    _drop_a_key(tensors, metadata)
    metadata[ZCH_METADATA] = json.dumps({"adgroup_id": {"rows": 300, "keys": 298, "miss_ranges": 1}})


@pytest.mark.parametrize(
    "change, message",
    [
        (
            _drop_a_key,
            r"zch table 'adgroup_id' stores \{'rows': 300, 'keys': 298, 'miss_ranges': 1\}, its metadata",
        ),
        (_row_outside_the_table, r"inconsistent remapping: rows outside \[0, 300\)"),
        (_unsorted_keys, "inconsistent remapping: keys are not strictly increasing"),
        (
            _sizes_in_both_places,
            r"zch table 'adgroup_id' has sizes .*'keys': 298.*, sparse.json .*'keys': 299",
        ),
    ],
)
@pytest.mark.parametrize("backend", ["rtp", "onnx"])
def test_an_inconsistent_remap_is_refused(din_zch_export, tmp_path, backend, change, message):
    _, result = din_zch_export
    folder = _copy(result.backends[backend].folder, tmp_path / backend)
    _rewrite_remap(folder, change)
    with pytest.raises(ArtifactError, match=message):
        load_backend(folder)


def test_a_remap_altered_in_transit_fails_its_sha256(din_zch_export, tmp_path):
    _, result = din_zch_export
    folder = _copy(result.backends["rtp"].folder, tmp_path / "rtp")
    data = bytearray((folder / ZCH_FILE).read_bytes())
    data[-3] ^= 0xFF
    (folder / ZCH_FILE).unlink()
    (folder / ZCH_FILE).write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match=rf"sha256 of '{ZCH_FILE}'"):
        load_backend(folder)


def test_a_remap_that_does_not_fit_its_table_is_not_written(din_zch, tmp_path):
    split = split_model(din_zch.model, din_zch.spec)
    r = split.remaps["adgroup_id"]
    small = ZchRemap(200, r.keys[:10], r.rows[:10] % 200, r.miss_key_starts, torch.tensor([199]))
    keys = din_zch.spec.sparse_keys()
    with pytest.raises(
        ValueError, match="zch table 'adgroup_id': the remapping covers 200 rows, the table has 300"
    ):
        write_tables(split.tables, split.metas, split.plan, keys, tmp_path, remaps={"adgroup_id": small})
    with pytest.raises(ValueError, match="zch table 'adgroup_id' has no remapping"):
        write_tables(split.tables, split.metas, split.plan, keys, tmp_path, remaps={})
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------ checkpoints
@pytest.mark.timeout(300)
def test_a_trained_zch_checkpoint_exports_through_the_export_stage(tmp_path):
    """The trainer (1 rank, DMP, DCP checkpoint) → ``recpipe export`` stage → rtp and jit with parity."""
    from recpipe.stages import export as export_stage
    from recpipe.train.loop import train

    data = zch_config("din_taobao_small.yaml", {"adgroup_id": 64}, shrink=True)
    config = tmp_path / "din_zch.yaml"
    config.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    generate("taobao", 2100, tmp_path / "all", seed=5, chunk_rows=2100)
    table = pq.read_table(tmp_path / "all")
    (tmp_path / "train").mkdir()
    (tmp_path / "eval").mkdir()
    pq.write_table(table.slice(0, 1600), tmp_path / "train" / "part-00000.parquet")
    pq.write_table(table.slice(1600), tmp_path / "eval" / "part-00000.parquet")
    cfg = parse_config(
        {**data, "data": {**data["data"], "batch_size": 64}, "train": {**data["train"], "max_steps": 12}}
    )
    spec = build_feature_spec(cfg)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        train(cfg, spec, str(tmp_path / "train"), None, tmp_path / "run")
    finally:
        torch.set_num_threads(threads)
    out = export_stage.run(str(tmp_path / "run"), "jit,rtp", str(tmp_path / "export"), str(tmp_path / "eval"))
    assert out.ok, out.describe()
    for backend in ("jit", "rtp"):
        b = out.backends[backend]
        assert b.status == "ok" and b.max_abs_logit_diff <= TOL, b
    doc = json.loads((backend_folder(tmp_path / "export" / "rtp") / SPARSE_META).read_text())
    assert [t["zch"] for t in doc["tables"] if t["name"] == "adgroup_id"] == [
        {"rows": 64, "keys": 63, "miss_ranges": 1}
    ]
