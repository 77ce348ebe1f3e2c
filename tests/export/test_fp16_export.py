"""A model with FP16 embedding tables (TorchEasyRec's ``data_type: "FP16"``) exports to jit, onnx and rtp with
parity. jit keeps the FP16 tables inside the model; the split backends (onnx, rtp) write every table as
float32, which holds each FP16 weight exactly, so their lookups read the trained values."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from safetensors import safe_open
from small_training import train_small

from recpipe.config import parse_config
from recpipe.export.api import export
from recpipe.export.split import model_tables
from recpipe.export.tables import SPARSE_META

ROOT = Path(__file__).resolve().parents[2]
BACKENDS = ["jit", "onnx", "rtp"]
FP16 = ("C1", "C2", "C3")


@pytest.fixture(scope="module")
def fp16_export(tmp_path_factory):
    data = yaml.safe_load((ROOT / "configs" / "dlrm_criteo_small.yaml").read_text())
    for f in data["features"]:
        for key in ("num_buckets", "hash_bucket_size"):
            if f.get(key, 0) > 1000:
                f[key] //= 100
        if f["name"] in FP16:
            f["data_type"] = "fp16"
    cfg = parse_config(data)
    small = train_small(cfg, "criteo", tmp_path_factory.mktemp("fp16"))
    result = export(small.model, small.spec, cfg, BACKENDS, tmp_path_factory.mktemp("x"), small.held_out)
    return small, result


@pytest.mark.slow
def test_fp16_tables_train_and_export_with_parity(fp16_export):
    small, result = fp16_export
    tables = model_tables(small.model)
    assert {name: w.dtype for name, (w, _) in tables.items() if name in FP16} == dict.fromkeys(
        FP16, torch.float16
    )
    for backend in BACKENDS:
        r = result.backends[backend]
        assert r.status == "ok", (backend, r.reason)
        assert r.parity.passed and r.parity.rows >= 1000, backend
    folder = Path(result.backends["rtp"].folder)
    doc = json.loads((folder / SPARSE_META).read_text())
    assert {t["name"]: t["dtype"] for t in doc["tables"]}["C1"] == "float32"
    files = [p for p in folder.iterdir() if p.suffix == ".safetensors"]
    found = {}
    for path in files:
        with safe_open(str(path), framework="pt") as fh:
            found.update({k: fh.get_tensor(k) for k in fh.keys()})
    c1 = next(v for k, v in found.items() if "C1" in k)
    assert c1.dtype == torch.float32
    assert torch.equal(c1, tables["C1"][0].detach().float())  # FP16 → float32 is exact
