"""The split-model base: every catalogued model is a SplitModel meeting RankingModel, its parameters are
``embeddings.…`` and ``dense.…``, and the dense parts import without torchrec."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch
from model_batches import capped_spec, dlrm_batch

from recpipe.config.catalogue import MODELS
from recpipe.models.base import SplitModel
from recpipe.models.protocol import DenseArchModule, RankingModel
from recpipe.models.registry import build_model

ROOT = Path(__file__).resolve().parents[2]
# Each catalogued model's own dense arch (the others reuse one of these).
DENSE_MODULES = [
    f"recpipe.models.{name}.dense"
    for name in MODELS
    if (ROOT / "recpipe" / "models" / name / "dense.py").is_file()
]
TORCH_ONLY = [
    "recpipe.models.base",
    "recpipe.models.protocol",
    *(f"recpipe.models.blocks.{b}" for b in ("mlp", "din", "interaction", "fm", "multitask")),
    *DENSE_MODULES,
]


def test_dense_parts_import_without_torchrec() -> None:
    """``benchmarks/gpu_check.py`` and export run the dense parts where torchrec and fbgemm are absent."""
    assert DENSE_MODULES == [
        "recpipe.models.multi_tower_din.dense",
        "recpipe.models.dlrm.dense",
        "recpipe.models.wide_and_deep.dense",
        "recpipe.models.dcn_v2.dense",
        "recpipe.models.mask_net.dense",
        "recpipe.models.xdeepfm.dense",
        "recpipe.models.wukong.dense",
        "recpipe.models.pepnet.dense",
        "recpipe.models.rocket_launching.dense",
    ]
    code = (
        "import importlib, sys\n"
        f"for m in {TORCH_ONLY!r}: importlib.import_module(m)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torchrec', 'fbgemm_gpu'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_every_model_is_a_split_model(din_spec, din_cfg, dlrm_spec, dlrm_cfg) -> None:
    for spec, cfg in ((din_spec, din_cfg), (dlrm_spec, dlrm_cfg)):
        model = build_model(spec, cfg.model, device="meta")
        assert isinstance(model, SplitModel) and isinstance(model, RankingModel)
        assert {n.split(".")[0] for n, _ in model.named_parameters()} == {"embeddings", "dense"}
        assert model.dense_module() is model.dense and model.dense_in_features == spec.dense_dim
        assert model.dense_input_names() == model.dense.input_names()
        assert not any(n.startswith("embeddings") for n, _ in DenseArchModule(model).named_parameters())


def test_forward_is_the_dense_arch_over_the_sparse_arch(dlrm_spec, dlrm_cfg) -> None:
    torch.manual_seed(0)
    spec = capped_spec(dlrm_spec)
    model = build_model(spec, dlrm_cfg.model).eval()
    batch = dlrm_batch(spec, 4, torch.Generator().manual_seed(0))
    emb = model.sparse_arch(batch.sparse)
    assert list(emb) == model.dense_input_names()[1:] and emb["C1"].shape == (4, 16)
    want = model.dense_arch(batch.dense, emb)
    assert want.shape == (4,)
    torch.testing.assert_close(model(batch.dense, batch.sparse), want)
    torch.testing.assert_close(model.predict(batch), want)
    positional = [batch.dense, *(emb[n] for n in model.dense_input_names()[1:])]
    torch.testing.assert_close(DenseArchModule(model)(*positional), want)
