"""recpipe against its peers, FuxiCTR 2.3.10 and DeepCTR-Torch 0.3.0: DIN and DLRM trained on the same generated
rows at one thread each, train rows/s and eval AUC side by side. "How does it compare" in one command.

Data. ``synthetic:taobao`` (default density, histories of mean ~4 items, at most 100) split as
``configs/din_taobao_quality.yaml`` says (the last day is the eval split) for DIN; ``synthetic:criteo`` split
as ``configs/dlrm_criteo_quality.yaml`` says (a hashed 10% eval) for DLRM. recpipe trains those configs in
this process (``quality.train_and_evaluate``: one epoch, batch 1024, Adagrad on the tables, Adam on the dense
part). The peers read the same split rows, encoded once into numpy arrays (:func:`encode`, timed apart) the
way their own preprocessing does it: every id column indexed by a vocabulary of the values seen in the train
rows (0 padding, the last index for unseen values; the same table sizes a peer's tokenizer builds, far smaller
than recpipe's configured buckets), ``price`` bucketized at the config's boundaries, Criteo's counts as
``log(x+3)`` (-2.5 when missing, as in the config), the history's three columns (``adgroup_id``, ``cate_id``,
``brand``, sharing the candidate's tables) padded with 0: to the batch's longest history for FuxiCTR (what its
LongCTR loader does), to the longest possible (100, the config's ``sequence_length``) for DeepCTR-Torch (its
inputs are one dense matrix).

Models, matched to recpipe's configs: embedding dim 16; DIN with a [128, 64, 32] MLP and a [64, 32] ReLU
attention MLP with unnormalized weights (recpipe: ``weighting: sigmoid``); DLRM with a [64, 16] bottom MLP,
dot interaction and a [128, 64] top MLP. Each peer trains with its own default optimizer (Adam, lr 1e-3, over
every parameter), its own loss and its own embedding initializer, without regularization (recpipe has none;
DeepCTR-Torch's default ``l2_reg_embedding=1e-6`` would also sum over whole tables every step). FuxiCTR: the
wheel's ``model_zoo.LongCTR.DIN`` and, since the wheel ships no DLRM (it lives in the repository's
``model_zoo/DLRM``), a DLRM assembled here from the wheel's own layers (``FeatureEmbedding``, ``MLP_Block``,
``InnerProductInteraction``) as that model_zoo file does. DeepCTR-Torch: ``deepctr_torch.models.DIN``; it has
no DLRM, so there is no ``dlrm_vs_deepctr``.

Timing. Each peer runs in its own process (``--worker``) pinned to one thread (``OMP_NUM_THREADS=1``,
``torch.set_num_threads(1)``); its batches are cut from the arrays before the clock starts, and the clock
covers the training steps only, each peer's own step (FuxiCTR's ``train_step``; DeepCTR-Torch's ``fit`` loop
body, replicated on prebuilt batches because ``fit`` collates every batch row by row through a DataLoader;
one epoch of that DataLoader is timed apart, ``own_loader_s``; FuxiCTR's loaders are not run, its LongCTR one
needs user and item tables this data does not have).
recpipe's figure is its trainer's ``rows_per_second``, which includes reading and parsing the Parquet rows
(one torch thread, one Arrow thread), so it is the harder side of the comparison. AUC: every model's eval
predictions scored by :func:`recpipe.auc.binary_auc`. The goal (issue 28): DIN >= 20x FuxiCTR and DLRM >= 5x at
an AUC no lower than the better peer's.

The peers' environment (:func:`peer_env`) is a folder of packages installed with ``pip install --no-deps
--target`` and put on ``PYTHONPATH`` ahead of recpipe's venv, so both sides run the same torch, numpy and
pandas. It is cached under ``~/.cache/recpipe/peers/<key of the pins>`` (``--env-dir``) and reused. Pinning
problems and their workarounds (``PEER_PINS``):

- FuxiCTR 2.3.10 requires ``ray[data]>=2.52.0``, and imports ray at import time (``fuxictr.pytorch.layers`` →
  ``pretrained_embedding`` → ``fuxictr.preprocess`` → ``build_dataset``: ``import ray``) though nothing here
  runs it. A resolving install pulls ray's data stack and would replace recpipe's numpy/pandas/pyarrow in the
  target folder; so ray 2.52.1 is installed without dependencies, plus the one of its required dependencies
  recpipe's venv lacks (``msgpack``; click, filelock, jsonschema, protobuf, pyyaml and requests are there).
- FuxiCTR also imports ``polars`` (``fuxictr.metrics``) and ``h5py`` (``fuxictr.preprocess.tokenizer``) at
  import time; both pinned (polars 2.x with its runtime wheel ``polars-runtime-32``).
- FuxiCTR's wheel installs top-level packages named ``model_zoo`` and ``tests``; in a ``--target`` folder they
  shadow nothing. Its ``model_zoo/LongCTR/fuxictr_version.py`` asserts fuxictr 2.3.2, but no module imports it.
- DeepCTR-Torch 0.3.0 asks PyPI for its latest version in a thread at import (``check_version``), and the
  process waits for that thread at exit; the workers get ``HTTP(S)_PROXY=http://127.0.0.1:9`` so the request
  fails at once.

Run: ``.venv/bin/python benchmarks/peers.py`` (250,000 rows of each data set: about 3-4 minutes on 2 cores,
most of it the peers' DINs). Last line: ``peers: din_vs_fuxictr=… din_vs_deepctr=… dlrm_vs_fuxictr=…
din_auc_delta=… dlrm_auc_delta=…`` (speed ratios: recpipe's train rows/s over the peer's; AUC deltas: recpipe
minus the better peer).

``--quick``: 4,000 rows of each, the same code path (the peers' environment is created when missing:
13 s from a package index; 32-42 s in all with it cached); the figures mean nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
import yaml
from _common import environment, parse_args, quick_out, warn_if_loaded
from quality import DIN_CONFIG, DLRM_CONFIG, prepare, train_and_evaluate

from recpipe.auc import binary_auc

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "peers.json"
PEER_PINS = (
    "fuxictr==2.3.10",
    "deepctr-torch==0.3.0",
    "ray==2.52.1",
    "msgpack==1.2.4",
    "polars==2.1.0",
    "polars-runtime-32==2.1.0",
    "h5py==3.16.0",
)
IMPORT_CHECK = "import fuxictr.pytorch.models, model_zoo.LongCTR.DIN, deepctr_torch.models"
NO_NETWORK = "http://127.0.0.1:9"  # a closed port: DeepCTR-Torch's version check fails at once
JOBS = {"din": ("fuxictr", "deepctr"), "dlrm": ("fuxictr",)}
GOALS = {"din_vs_fuxictr": 20.0, "dlrm_vs_fuxictr": 5.0}
EMBEDDING_DIM = 16
DIN_MLP, DIN_ATTENTION_MLP = [128, 64, 32], [64, 32]
DLRM_BOTTOM, DLRM_TOP = [64], [128, 64]  # the bottom MLP ends in EMBEDDING_DIM: recpipe's [64, 16]
ITEMS = ("adgroup_id", "cate_id", "brand")  # the history's columns, sharing the candidate's tables


def peer_env(root: Path) -> tuple[Path, float | None]:
    """The peers' package folder under ``root``, keyed by :data:`PEER_PINS` and the Python version: reused when
    complete, else installed (``pip install --no-deps --target``) and import-checked. Returns the folder and
    the install seconds (None when reused)."""
    key = hashlib.sha256("\n".join((sys.version.split()[0], *PEER_PINS)).encode()).hexdigest()[:12]
    folder = root / f"env-{key}"
    if (folder / "PINS").is_file():
        return folder, None
    t0 = time.perf_counter()
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="env-", dir=root))
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(staging), *PEER_PINS]
    done = subprocess.run(pip, capture_output=True, text=True)
    if done.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"installing the peers ({' '.join(PEER_PINS)}) failed:\n{done.stderr[-3000:]}")
    check = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK], env=_worker_env(staging), capture_output=True, text=True
    )
    if check.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"the peers installed in {staging} do not import:\n{check.stderr[-3000:]}")
    (staging / "PINS").write_text("\n".join(PEER_PINS) + "\n")
    if folder.exists():  # another run finished first
        shutil.rmtree(staging, ignore_errors=True)
    else:
        staging.rename(folder)
    return folder, time.perf_counter() - t0


def _worker_env(env_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "no_proxy")}
    env.update(
        PYTHONPATH=os.pathsep.join((str(env_dir), str(ROOT))),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        HTTP_PROXY=NO_NETWORK,
        HTTPS_PROXY=NO_NETWORK,
    )
    return env


# --- encoding the split rows once for the peers --------------------------------------------------------------


def _read(folder: str) -> pa.Table:
    return pq.read_table(folder)


def _filled(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    return pc.fill_null(col, pa.scalar("" if pa.types.is_string(col.type) else 0, col.type))


def _indexer(seen: pa.Array) -> tuple[pa.Array, int]:
    """The vocabulary of ``seen`` and its table size: index 0 pads, 1..V are the values, V+1 is unseen."""
    values = pc.unique(seen)
    return values, len(values) + 2


def _index(col: pa.Array, values: pa.Array) -> np.ndarray:
    idx = pc.index_in(col, value_set=values)
    return pc.fill_null(idx, len(values)).to_numpy().astype(np.int64) + 1


def _history(table: pa.Table, max_len: int) -> tuple[dict[str, pa.Array], np.ndarray]:
    """``click_50_seq`` (``item|item``, an item ``adgroup\\x03cate\\x03brand``) as three flat int columns and
    the per-row lengths, cut to ``max_len`` (the most recent items come first)."""
    seq = table.column("click_50_seq").combine_chunks()
    seq = pc.if_else(pc.equal(seq, ""), pa.scalar(None, pa.string()), seq)
    items = pc.split_pattern(seq, "|")
    lengths = pc.fill_null(pc.list_value_length(items), 0).to_numpy().astype(np.int64)
    parts = pc.split_pattern(pc.list_flatten(items), "\x03")
    flat = {}
    for k, name in enumerate(ITEMS):
        part = pc.list_element(parts, k)
        part = pc.if_else(pc.equal(part, ""), "0", part)  # an ad without brand: the config's default_value
        flat[name] = pc.cast(part, pa.int64())
    return flat, lengths


def _pad(idx: np.ndarray, lengths: np.ndarray, max_len: int) -> np.ndarray:
    rows = np.repeat(np.arange(lengths.size), lengths)
    pos = np.arange(rows.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    keep = pos < max_len
    out = np.zeros((lengths.size, max_len), np.int64)
    out[rows[keep], pos[keep]] = idx[keep]
    return out


def encode(model: str, train_dir: str, eval_dir: str, config: Path, out: Path) -> dict[str, Any]:
    """Write ``out/{train,eval}.npz`` (``label``, ``cat:<name>``, ``num:<name>``, ``hist:<name>``,
    ``hist_len``) and ``out/meta.json`` (each categorical's table size) for the peers; returns the meta."""
    cfg = yaml.safe_load(config.read_text())
    features = {f["name"]: f for f in cfg["features"]}
    label = cfg["data"]["label"]
    tables = {"train": _read(train_dir), "eval": _read(eval_dir)}
    arrays: dict[str, dict[str, np.ndarray]] = {
        s: {"label": t.column(label).to_numpy()} for s, t in tables.items()
    }
    meta: dict[str, Any] = {"label": label, "vocab": {}, "numeric": [], "items": [], "max_len": 0}
    if model == "din":
        seq = next(f for f in cfg["features"] if f["kind"] == "sequence")
        meta["max_len"] = max_len = seq["sequence_length"]
        hist = {s: _history(t, max_len) for s, t in tables.items()}
        meta["items"] = list(ITEMS)
        for name, f in features.items():
            if f["kind"] == "sequence":
                continue
            cols = {s: _filled(t.column(name)) for s, t in tables.items()}
            if f["kind"] == "raw":  # price: its boundaries' buckets
                bounds = np.asarray(f["boundaries"])
                for s, c in cols.items():
                    arrays[s][f"cat:{name}"] = np.searchsorted(bounds, c.to_numpy(), side="right") + 1
                meta["vocab"][name] = len(bounds) + 2
                continue
            seen = cols["train"]
            if name in ITEMS:
                seen = pa.concat_arrays([pc.cast(seen, pa.int64()), hist["train"][0][name]])
                cols = {s: pc.cast(c, pa.int64()) for s, c in cols.items()}
            values, meta["vocab"][name] = _indexer(seen)
            for s, c in cols.items():
                arrays[s][f"cat:{name}"] = _index(c, values)
                if name in ITEMS:
                    flat, lengths = hist[s]
                    arrays[s][f"hist:{name}"] = _pad(_index(flat[name], values), lengths, max_len)
        for s, (_, lengths) in hist.items():
            arrays[s]["hist_len"] = np.minimum(lengths, max_len)
    else:
        for name, f in features.items():
            if f["kind"] == "raw":
                meta["numeric"].append(name)
                for s, t in tables.items():
                    x = t.column(name).to_numpy(zero_copy_only=False).astype(np.float64)
                    arrays[s][f"num:{name}"] = np.where(np.isnan(x), f["default"], np.log(x + 3)).astype(
                        np.float32
                    )
                continue
            cols = {s: _filled(t.column(name)) for s, t in tables.items()}
            values, meta["vocab"][name] = _indexer(cols["train"])
            for s, c in cols.items():
                arrays[s][f"cat:{name}"] = _index(c, values)
    out.mkdir(parents=True, exist_ok=True)
    for s, a in arrays.items():
        np.savez(out / f"{s}.npz", **a)
    (out / "meta.json").write_text(json.dumps(meta))
    return meta


# --- the peers, in a worker process on the peers' environment -------------------------------------------------


def _batches(n: int, batch_size: int) -> list[slice]:
    return [slice(i, min(i + batch_size, n)) for i in range(0, n, batch_size)]


def _fuxictr_map(meta: dict[str, Any], tmp: Path) -> Any:
    from fuxictr.features import FeatureMap

    fmap = FeatureMap("peers", str(tmp))
    fmap.labels, fmap.default_emb_dim = [meta["label"]], EMBEDDING_DIM
    for name in meta["numeric"]:
        fmap.features[name] = {"type": "numeric", "source": ""}
    for name, size in meta["vocab"].items():
        item = name in meta["items"]
        fmap.features[name] = {"type": "categorical", "source": "item" if item else "", "vocab_size": size}
        if item:
            fmap.features[name]["padding_idx"] = 0
    fmap.num_fields = fmap.get_num_fields()
    fmap.set_column_index()
    return fmap


def _fuxictr_common(tmp: Path) -> dict[str, Any]:
    return {"gpu": -1, "optimizer": "adam", "loss": "binary_crossentropy", "learning_rate": 1e-3,
            "embedding_dim": EMBEDDING_DIM, "verbose": 0, "model_root": str(tmp), "metrics": ["AUC"]}  # fmt: skip


def _fuxictr_din_batch(a: dict[str, np.ndarray], meta: dict[str, Any], s: slice) -> tuple:
    """FuxiCTR LongCTR's batch: (features, item features of each row's history then its candidate, mask)."""
    length = max(1, int(a["hist_len"][s].max()))  # padded to the batch's longest history, as its loader does
    plain = {n: torch.from_numpy(a[f"cat:{n}"][s]) for n in meta["vocab"] if n not in meta["items"]}
    plain[meta["label"]] = torch.from_numpy(a["label"][s])
    items = {
        n: torch.from_numpy(
            np.concatenate([a[f"hist:{n}"][s, :length], a[f"cat:{n}"][s, None]], 1).reshape(-1)
        )
        for n in meta["items"]
    }
    mask = torch.from_numpy(a[f"hist:{meta['items'][0]}"][s, :length] > 0).float()
    return plain, items, mask


def _fuxictr_dlrm_batch(a: dict[str, np.ndarray], meta: dict[str, Any], s: slice) -> dict[str, torch.Tensor]:
    batch = {n: torch.from_numpy(a[f"cat:{n}"][s]) for n in meta["vocab"]}
    batch.update({n: torch.from_numpy(a[f"num:{n}"][s]) for n in meta["numeric"]})
    batch[meta["label"]] = torch.from_numpy(a["label"][s])
    return batch


def _fuxictr_dlrm(fmap: Any, kwargs: dict[str, Any]) -> Any:
    """FuxiCTR's DLRM (``model_zoo/DLRM``, not in the wheel) from the wheel's layers: bottom MLP over the
    numeric features into one more field, pairwise inner products, top MLP over them and the bottom output."""
    from fuxictr.pytorch.layers import FeatureEmbedding, InnerProductInteraction, MLP_Block
    from fuxictr.pytorch.models import BaseModel

    class DLRM(BaseModel):
        def __init__(self, feature_map: Any, **kw: Any) -> None:
            super().__init__(feature_map, model_id="DLRM", **kw)
            self.dense = [f for f, spec in feature_map.features.items() if spec["type"] == "numeric"]
            self.embedding_layer = FeatureEmbedding(
                feature_map, EMBEDDING_DIM, not_required_feature_columns=self.dense
            )
            self.bottom_mlp = MLP_Block(
                len(self.dense), DLRM_BOTTOM, "ReLU", output_dim=EMBEDDING_DIM, output_activation="ReLU"
            )
            fields = feature_map.num_fields - len(self.dense) + 1
            self.interact = InnerProductInteraction(num_fields=fields, output="inner_product")
            top_in = fields * (fields - 1) // 2 + EMBEDDING_DIM
            self.top_mlp = MLP_Block(
                top_in, DLRM_TOP, "ReLU", output_dim=1, output_activation=self.output_activation
            )
            self.compile(kw["optimizer"], kw["loss"], kw["learning_rate"])
            self.reset_parameters()
            self.model_to_device()

        def forward(self, inputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            x = self.get_inputs(inputs)
            dense = self.bottom_mlp(torch.cat([x[k].float().view(-1, 1) for k in self.dense], dim=-1))
            fields = torch.cat([self.embedding_layer(x), dense.unsqueeze(1)], dim=1)
            return {"y_pred": self.top_mlp(torch.cat([self.interact(fields), dense], dim=-1))}

    return DLRM(fmap, **kwargs)


def _run_fuxictr(
    model: str, arrays: dict[str, dict[str, np.ndarray]], meta: dict[str, Any], tmp: Path, bs: int
):
    from model_zoo.LongCTR.DIN import DIN

    fmap = _fuxictr_map(meta, tmp)
    kwargs = _fuxictr_common(tmp)
    if model == "din":
        net = DIN(fmap, dnn_hidden_units=DIN_MLP, dnn_activations="ReLU", attention_hidden_units=DIN_ATTENTION_MLP,
                  attention_hidden_activations="ReLU", din_use_softmax=False, **kwargs)  # fmt: skip
        cut = _fuxictr_din_batch
    else:
        net = _fuxictr_dlrm(fmap, kwargs)
        cut = _fuxictr_dlrm_batch
    net._max_gradient_norm = 10.0  # what fit() sets (its default) before train_step runs

    def step(i: int, batch: Any) -> None:
        net._batch_index = i
        net.train_step(batch)

    def predict(batch: Any) -> np.ndarray:
        return net.forward(batch)["y_pred"].reshape(-1).numpy()

    return net, step, predict, lambda a, s: cut(a, meta, s), None


def _run_deepctr(
    model: str, arrays: dict[str, dict[str, np.ndarray]], meta: dict[str, Any], tmp: Path, bs: int
):
    from deepctr_torch.inputs import SparseFeat, VarLenSparseFeat
    from deepctr_torch.models import DIN

    if model != "din":
        raise ValueError(f"DeepCTR-Torch has no {model}")
    columns: list[Any] = [
        SparseFeat(n, size, embedding_dim=EMBEDDING_DIM) for n, size in meta["vocab"].items()
    ]
    columns += [
        VarLenSparseFeat(
            SparseFeat(f"hist_{n}", meta["vocab"][n], embedding_dim=EMBEDDING_DIM, embedding_name=n),
            maxlen=meta["max_len"],
            length_name="hist_len",
        )
        for n in meta["items"]
    ]
    net = DIN(columns, list(meta["items"]), dnn_hidden_units=tuple(DIN_MLP), att_hidden_size=tuple(DIN_ATTENTION_MLP),
              att_activation="relu", l2_reg_embedding=0.0, seed=0, device="cpu")  # fmt: skip
    net.compile("adam", "binary_crossentropy")
    matrices = {}
    for (
        split,
        a,
    ) in arrays.items():  # fit()'s input: every feature's column(s) side by side, in feature_index order
        named = {n: a[f"cat:{n}"] for n in meta["vocab"]}
        named.update({f"hist_{n}": a[f"hist:{n}"] for n in meta["items"]}, hist_len=a["hist_len"])
        matrices[split] = np.concatenate(
            [named[n].reshape(len(a["label"]), -1) for n in net.feature_index], axis=-1
        )

    def step(i: int, batch: tuple[torch.Tensor, torch.Tensor]) -> None:  # the body of fit()'s batch loop
        x, y = batch[0].float(), batch[1].float()
        y_pred = net(x).squeeze(-1)
        net.optim.zero_grad()
        loss = net.loss_func(y_pred, y, reduction="sum")
        total = loss + net.get_regularization_loss() + net.aux_loss
        total.backward()
        net.optim.step()

    def predict(batch: tuple[torch.Tensor, torch.Tensor]) -> np.ndarray:
        return net(batch[0].float()).reshape(-1).numpy()

    def cut(a: dict[str, np.ndarray], s: slice) -> tuple[torch.Tensor, torch.Tensor]:
        split = "train" if a is arrays["train"] else "eval"
        return torch.from_numpy(matrices[split][s]), torch.from_numpy(a["label"][s])

    def own_loader() -> None:  # the DataLoader fit() builds (shuffled, a row at a time, then collated)
        data = torch.utils.data.TensorDataset(torch.from_numpy(matrices["train"]), torch.from_numpy(y_train))
        for _ in torch.utils.data.DataLoader(data, shuffle=True, batch_size=bs):
            pass

    y_train = arrays["train"]["label"]
    return net, step, predict, cut, own_loader


def worker(peer: str, model: str, data: Path, out: Path, batch_size: int) -> None:
    """Train ``peer``'s ``model`` one epoch on ``data/train.npz`` at one thread, predict ``data/eval.npz``;
    write ``out`` (seconds, rows/s) and the predictions next to it (``.npy``)."""
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    meta = json.loads((data / "meta.json").read_text())
    arrays = {s: dict(np.load(data / f"{s}.npz")) for s in ("train", "eval")}
    load_s = time.perf_counter() - t0
    build = {"fuxictr": _run_fuxictr, "deepctr": _run_deepctr}[peer]
    t0 = time.perf_counter()
    net, step, predict, cut, own_loader = build(model, arrays, meta, out.parent, batch_size)
    batches = {s: [cut(a, sl) for sl in _batches(len(a["label"]), batch_size)] for s, a in arrays.items()}
    prepare_s = time.perf_counter() - t0
    net.train()
    t0 = time.perf_counter()
    for i, batch in enumerate(batches["train"]):
        step(i, batch)
    train_s = time.perf_counter() - t0
    net.eval()
    t0 = time.perf_counter()
    with torch.no_grad():
        pred = np.concatenate([predict(b) for b in batches["eval"]])
    predict_s = time.perf_counter() - t0
    np.save(out.with_suffix(".npy"), pred)
    own_loader_s = None
    if own_loader is not None:  # the peer's own batching, for a train epoch: apart from train_s
        t0 = time.perf_counter()
        own_loader()
        own_loader_s = time.perf_counter() - t0
    rows = len(arrays["train"]["label"])
    report = {"train_rows": rows, "steps": len(batches["train"]), "train_s": train_s, "rows_per_s": rows / train_s,
              "predict_s": predict_s, "load_s": load_s, "prepare_s": prepare_s, "threads": torch.get_num_threads(), "own_loader_s": own_loader_s}  # fmt: skip
    out.write_text(json.dumps(report))


# --- the benchmark -------------------------------------------------------------------------------------------


def run_peer(peer: str, model: str, data: Path, env_dir: Path, work: Path, batch_size: int) -> dict[str, Any]:
    """``peer``'s ``model`` in a worker process on ``env_dir``; its report, eval AUC and load after."""
    out = work / f"{peer}-{model}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", peer, model, str(data), str(out)]
    cmd += ["--batch-size", str(batch_size)]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=_worker_env(env_dir), cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{peer} {model} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    report = json.loads(out.read_text())
    labels = np.load(data / "eval.npz")["label"]
    report.update(
        auc=binary_auc(labels, np.load(out.with_suffix(".npy"))),
        eval_rows=len(labels),
        wall_s=time.perf_counter() - t0,
        load_after=os.getloadavg()[0],
    )
    return report


def run_recpipe(config: Path, data: Any, work: Path) -> dict[str, Any]:
    r = train_and_evaluate(config, data, work, evals=1)
    keep = (
        "auc",
        "logloss",
        "eval_rows",
        "train_rows",
        "steps",
        "batch_size",
        "train_s",
        "wall_s",
        "rows_per_s",
    )
    return {**{k: r[k] for k in keep}, "load_after": os.getloadavg()[0]}


def _say(model: str, name: str, r: dict[str, Any]) -> None:
    print(
        f"peers [{model} {name}]: auc {r['auc']:.4f}, {r['rows_per_s']:,.0f} train rows/s "
        f"({r['train_rows']:,} rows, {r['train_s']:.1f}s), load {r['load_after']:.1f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--din-rows", type=int, default=250_000, help="generated Taobao rows (train + eval)")
    parser.add_argument("--dlrm-rows", type=int, default=250_000, help="generated Criteo rows (train + eval)")
    parser.add_argument("--batch-size", type=int, default=1024, help="the peers' (recpipe's is its config's)")
    parser.add_argument("--seed", type=int, default=0)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "recpipe" / "peers"
    parser.add_argument("--env-dir", type=Path, default=cache, help="where the peers' environments are kept")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--worker", nargs=4, metavar=("PEER", "MODEL", "DATA", "OUT"), help=argparse.SUPPRESS)
    quick = {"din_rows": 4_000, "dlrm_rows": 4_000, "out": quick_out(RESULTS.name)}
    args = parse_args(parser, quick)
    if args.worker:
        peer, model, data, out = args.worker
        worker(peer, model, Path(data), Path(out), args.batch_size)
        return
    torch.set_num_threads(1)  # recpipe at one thread, as the peers
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    started, load_before = time.perf_counter(), os.getloadavg()
    env_dir, install_s = peer_env(args.env_dir)
    print(
        f"peers: environment {env_dir} ({'reused' if install_s is None else f'created in {install_s:.1f}s'})"
    )
    rows = {"din": args.din_rows, "dlrm": args.dlrm_rows}
    configs = {"din": DIN_CONFIG, "dlrm": DLRM_CONFIG}
    runs: dict[str, dict[str, Any]] = {}
    encode_s: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="recpipe-peers-") as tmp_dir:
        tmp = Path(tmp_dir)
        for model, kind in (("din", "taobao"), ("dlrm", "criteo")):
            data = prepare(kind, rows[model], "", tmp / f"{model}-data", configs[model], args.seed)
            t0 = time.perf_counter()
            encode(model, data.train_dir, data.eval_dir, configs[model], tmp / f"{model}-peers")
            encode_s[model] = round(time.perf_counter() - t0, 2)
            runs[model] = {"recpipe": run_recpipe(configs[model], data, tmp / f"{model}-recpipe")}
            _say(model, "recpipe", runs[model]["recpipe"])
            for peer in JOBS[model]:
                r = run_peer(peer, model, tmp / f"{model}-peers", env_dir, tmp, args.batch_size)
                runs[model][peer] = r
                _say(model, peer, r)
    speed = {
        f"{m}_vs_{p}": runs[m]["recpipe"]["rows_per_s"] / runs[m][p]["rows_per_s"]
        for m in JOBS
        for p in JOBS[m]
    }
    delta = {
        f"{m}_auc_delta": runs[m]["recpipe"]["auc"] - max(runs[m][p]["auc"] for p in JOBS[m]) for m in JOBS
    }
    summary = {**speed, **delta}
    report = {
        "benchmark": "peers",
        "peers": {"pins": list(PEER_PINS), "env": str(env_dir), "install_s": install_s},
        "rows": rows,
        "configs": {m: str(c.relative_to(ROOT)) for m, c in configs.items()},
        "batch_size": args.batch_size,
        "threads": 1,
        "encode_s": encode_s,
        "goal": "din_vs_fuxictr >= 20, dlrm_vs_fuxictr >= 5, din_auc_delta >= 0",
        "goal_met": all(summary[k] >= v for k, v in GOALS.items()) and summary["din_auc_delta"] >= 0,
        "runs": runs,
        "summary": summary,
        "environment": environment(started, load_before),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    warn_if_loaded(load_before, os.getloadavg())
    print("peers: " + " ".join(f"{k}={v:.4f}" for k, v in summary.items()))


if __name__ == "__main__":
    main()
