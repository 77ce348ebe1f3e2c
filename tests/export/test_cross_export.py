"""The cross models (DCNv2, DCNv1, MaskNet, xDeepFM) and RocketLaunching, each trained a few steps on generated Criteo rows over
``configs/deepfm_criteo_small.yaml``'s features, through jit, onnx and rtp with parity, and one request scored
by the registered pyfunc the scoring server runs (:class:`~recpipe.tracking.pyfunc.RawRowsModel`); AOTI (a
compile per model, 25-70 s) for the three whose graphs differ (``AOTI_MODELS``), slow-marked, and so are the
models after DCNv2."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from small_training import train_small

from recpipe.config import parse_config
from recpipe.eval.metrics import sigmoid
from recpipe.export.api import export
from recpipe.export.layout import backend_folder
from recpipe.tracking.pyfunc import ARTIFACT, RawRowsModel

ROOT = Path(__file__).resolve().parents[2]
INTS = [f"I{i}" for i in range(1, 14)]
CATS = [f"C{i}" for i in range(1, 27)]
ALL = [{"name": "all", "type": "deep", "features": INTS + CATS}]
SMALL_MLP = {"hidden_units": [16]}
MODELS = {
    "dcn_v2": (ALL, {"type": "dcn_v2", "cross": {"num_layers": 2, "low_rank": 4}, "deep": SMALL_MLP,
                     "final": {"hidden_units": [8]}, "backbone": {"hidden_units": [32]}}),
    "dcn_v1": (ALL, {"type": "dcn_v1", "cross": {"num_layers": 2}, "deep": SMALL_MLP, "final": {"hidden_units": [8]}}),
    "mask_net": (ALL, {"type": "mask_net", "num_blocks": 2, "mask_block": {"hidden_dim": 16, "reduction_ratio": 0.5},
                       "top_mlp": {"hidden_units": [8]}, "parallel": False}),
    "xdeepfm": (
        [{"name": "wide", "type": "wide", "embedding_dim": 8, "features": CATS[:6]},
         {"name": "deep", "type": "deep", "features": INTS + CATS}],
        {"type": "xdeepfm", "cin_layer_sizes": [4, 4], "deep": SMALL_MLP, "final": {"hidden_units": [8]}},
    ),
    # The served graph is the light net alone; the booster's layers are trained only.
    "rocket_launching": (ALL, {"type": "rocket_launching", "booster_mlp": {"hidden_units": [32, 16]},
                               "light_mlp": SMALL_MLP, "feature_based_distillation": True, "num_class": 2}),
}  # fmt: skip


def _config(name: str):
    import yaml

    data = yaml.safe_load((ROOT / "configs" / "deepfm_criteo_small.yaml").read_text())
    groups, model = MODELS[name]
    for f in data["features"]:
        if "hash_bucket_size" in f:
            f["hash_bucket_size"] = 1000
    data.update(feature_groups=groups, model=model)
    return parse_config(data)


# DCNv2 runs in the fast suite (~25 s with its training); the others, alike, are slow-marked.
@pytest.fixture(
    scope="module",
    params=[pytest.param(m, marks=() if m == "dcn_v2" else pytest.mark.slow) for m in MODELS],
)
def trained(request, tmp_path_factory):
    cfg = _config(request.param)
    return request.param, cfg, train_small(cfg, "criteo", tmp_path_factory.mktemp(request.param))


def test_jit_onnx_rtp_pass_parity_and_the_pyfunc_serves_a_request(trained, tmp_path):
    name, cfg, small = trained
    assert type(small.model).__module__ == f"recpipe.models.{name}.model" or name == "dcn_v1"
    result = export(small.model, small.spec, cfg, ["jit", "onnx", "rtp"], tmp_path, small.held_out)
    for backend in ("jit", "onnx", "rtp"):
        b = result.backends[backend]
        assert b.status == "ok" and b.parity.passed, (backend, b.parity)
        assert b.parity.max_abs_logit_diff <= 1e-4
    rows = small.clean.slice(0, 16)
    model = RawRowsModel()
    model.load_context(SimpleNamespace(artifacts={ARTIFACT: str(backend_folder(tmp_path / "rtp"))}))
    served = model.predict(None, rows.drop_columns(["label"]).to_pandas())
    logits = small.model(*_inputs(small, rows)).detach().numpy()
    np.testing.assert_allclose(np.asarray(served).ravel(), sigmoid(logits.astype(np.float64)), atol=1e-5)
    assert len(set(np.round(logits, 5))) > 1  # rows differ: not one constant score


# AOTInductor (a compile each: ~25 CPU-s, most of what this file costs) for the models whose served graph has
# operations of its own: DCNv2's low-rank cross, MaskNet's layer norms and instance-guided masks, xDeepFM's CIN.
# DCNv1 is DCNv2's class with DCN's cross network (x0 * (x . w) + b + x: a matmul, products and sums, all in DCNv2's
# graph) and RocketLaunching serves its light MLP alone (every model's deep tower); both pass parity through jit,
# onnx and rtp above (rtp's dense part a torch.export program).
AOTI_MODELS = ["dcn_v2", "mask_net", "xdeepfm"]


@pytest.mark.slow
@pytest.mark.parametrize("trained", AOTI_MODELS, indirect=True)
def test_aoti_passes_parity(trained, tmp_path):
    name, cfg, small = trained
    b = export(small.model, small.spec, cfg, ["aoti"], tmp_path, small.held_out).backends["aoti"]
    assert b.status == "ok" and b.parity.passed, (name, b.parity)


def _inputs(small, rows):
    from recpipe.batch import to_batch
    from recpipe.features.fg import FeatureGenerator

    b = to_batch(FeatureGenerator(small.spec, with_labels=False)(rows), small.spec.sparse_keys())
    return b.dense, b.sparse
