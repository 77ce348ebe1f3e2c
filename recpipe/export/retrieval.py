"""Export of a retrieval model: the user tower as an AOTInductor package, every catalogue item's embedding as
safetensors, and the catalogue's FAISS index (:mod:`recpipe.export.faiss_index`), each a folder sealed by its
``manifest.json`` and published at once through ``export.json`` (:mod:`recpipe.export.layout`), as a ranking
export is.

::

    out/versions/<v>/user_tower/        model.pt2 (user tower: (dense, values, lengths) → (B, D)), fg.json
    out/versions/<v>/item_embeddings/   item_embeddings.safetensors ("embeddings" (N, D) float32), item_ids.parquet,
                                        item_attributes.parquet (the catalogue's columns, for a ranker)
    out/versions/<v>/faiss_index/       flat.faiss (exact), hnsw.faiss (a catalogue of ANN_MIN_ITEMS or more)

Every folder is read back verified (sha256, signature) before it is checked: the user tower's embeddings against
the eager model's on held-out rows (batches of 1, 7 and 512), the stored item embeddings bit for bit, the flat
index's top-K scores against brute force, the HNSW index's recall against the flat one. A failure publishes
nothing and leaves the previous export in charge.
"""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

from recpipe.config import RecpipeConfig
from recpipe.data.negative_sampler import ItemTable
from recpipe.export import faiss_index
from recpipe.export.layout import (
    STAGING_PREFIX,
    clean_stale,
    new_version,
    publish,
    read_pointer,
    version_folder,
)
from recpipe.export.manifest import ArtifactError, ExportError, Manifest, read_manifest, record_files
from recpipe.features.raw import column_kinds
from recpipe.features.spec import FeatureSpec

USER_TOWER = "user_tower"
ITEM_EMBEDDINGS = "item_embeddings"
INDEX = "faiss_index"
PACKAGE = "model.pt2"
EMBEDDINGS_FILE = "item_embeddings.safetensors"
IDS_FILE = "item_ids.parquet"
# Every column of the catalogue, row j the item of item_ids row j: what a ranker reads of each retrieved item at
# serving (recpipe.export.pair), its id included.
ATTRIBUTES_FILE = "item_attributes.parquet"
PARITY_BATCHES = (1, 7, 512)  # a lone request, an odd size, a large batch: none specialised away
CATALOGUE_CHUNK = 8192


class UserTower(nn.Module):
    """``(dense, values, lengths)`` (FG's output, key-major lengths over ``keys``) → the user tower's ``(B, D)``.

    Args:
        model (nn.Module): a :class:`~recpipe.models.protocol.RetrievalModel`.
        keys (list[str]): the FeatureSpec's sparse keys, in order (the item tower's are read as empty).
    """

    def __init__(self, model: nn.Module, keys: list[str]) -> None:
        super().__init__()
        self.model = model
        self.keys = list(keys)

    def forward(self, dense: torch.Tensor, values: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor

        kjt = KeyedJaggedTensor.from_lengths_sync(keys=self.keys, values=values, lengths=lengths)
        return self.model.user_embedding(dense, kjt)


@dataclass
class RetrievalExportOutcome:
    """What a retrieval export wrote and how its checks went.

    Args:
        out_dir (str): the export folder.
        version (str | None), previous (str | None): the published version and the one before.
        folders (dict[str, str]): each part's folder in the version.
        user_tower_parity (dict): rows, batch sizes, ``max_abs_diff`` of the embeddings, tolerance.
        items (int), dim (int): the catalogue's size and the embeddings' width.
        index (dict): ``flat`` (its file and exact check) and ``ann`` (an :class:`AnnReport` or why none).
    """

    out_dir: str
    version: str | None = None
    previous: str | None = None
    folders: dict[str, str] = field(default_factory=dict)
    user_tower_parity: dict[str, Any] = field(default_factory=dict)
    items: int = 0
    dim: int = 0
    index: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "retrieval", **asdict(self), "backends": dict(self.folders)}

    @property
    def ok(self) -> bool:
        """Published (a failed check raises instead)."""
        return self.version is not None

    def metadata(self) -> dict[str, str | float]:
        """Flat KFP artifact metadata, as :meth:`~recpipe.export.outcome.ExportOutcome.metadata` gives a ranking
        export's: the user tower's parity, the catalogue's size and the ANN index's recall against exact."""
        out: dict[str, str | float] = {"user_tower": "passed" if self.ok else "failed", "items": self.items}
        if self.user_tower_parity.get("max_abs_diff") is not None:
            out["user_tower_max_abs_diff"] = float(self.user_tower_parity["max_abs_diff"])
        ann = self.index.get("ann") or {}
        if ann.get("kind"):
            out["ann_index"] = str(ann["kind"])
            out["ann_recall_vs_exact"] = float(ann["recall_vs_exact"])
        return out

    def describe(self) -> str:
        p = self.user_tower_parity
        lines = [
            f"user_tower: ok, max |Δembedding| {p.get('max_abs_diff', float('nan')):.3g} on {p.get('rows')} rows",
            f"item_embeddings: {self.items} items × {self.dim}",
        ]
        ann = self.index.get("ann") or {}
        if ann.get("kind"):
            lines.append(
                f"faiss_index: flat + {ann['kind']} (recall@{ann['k']} vs exact {ann['recall_vs_exact']:.4f}, "
                f"ef_search {ann['params']['ef_search']})"
            )
        else:
            lines.append(f"faiss_index: flat only ({ann.get('reason', '')})")
        return "\n".join(lines)


def _kjt_tensors(spec: FeatureSpec, rows: pa.Table) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    from recpipe.export.tables import fg_to_kjt_arrays
    from recpipe.features.fg import FeatureGenerator

    f = FeatureGenerator(spec)(rows)
    values, lengths = fg_to_kjt_arrays(f.values, f.lengths)
    return torch.from_numpy(f.dense), values, lengths


def _parity_chunks(n: int) -> list[tuple[int, int]]:
    """Row ranges of ``n`` rows in batches cycling through :data:`PARITY_BATCHES`."""
    out, at, i = [], 0, 0
    while at < n:
        size = PARITY_BATCHES[i % len(PARITY_BATCHES)]
        out.append((at, min(n, at + size)))
        at, i = at + size, i + 1
    return out


def catalogue_embeddings(
    model: nn.Module, spec: FeatureSpec, items: ItemTable, schema: pa.Schema
) -> np.ndarray:
    """``(N, D)`` float32: every catalogue item's embedding (row ``j`` is the item table's row ``j``)."""
    from recpipe.features.fg import FeatureGenerator
    from recpipe.train.retrieval import item_rows, rows_batch

    fg = FeatureGenerator(spec)
    rows = item_rows(items.attrs, schema, tuple(spec.labels))
    parts = []
    with torch.no_grad():
        for start in range(0, rows.num_rows, CATALOGUE_CHUNK):
            batch = rows_batch(fg, rows.slice(start, CATALOGUE_CHUNK))
            parts.append(model.item_embedding(batch.dense, batch.sparse).numpy().astype(np.float32))
    return np.concatenate(parts)


def export_retrieval(
    model: nn.Module,
    spec: FeatureSpec,
    cfg: RecpipeConfig,
    items: ItemTable,
    out_dir: str | Path,
    parity_rows: pa.Table,
    ann_min_items: int = faiss_index.ANN_MIN_ITEMS,
    min_ann_recall: float = faiss_index.MIN_ANN_RECALL,
) -> RetrievalExportOutcome:
    """Export ``model``'s user tower, the catalogue's embeddings and its FAISS index under ``out_dir``.

    Args:
        model (nn.Module): a trained retrieval model on CPU.
        spec (FeatureSpec): its FeatureSpec.
        cfg (RecpipeConfig): its config (``export.max_abs_logit_diff`` bounds the embeddings' difference;
            ``eval.recall_at_k``'s largest K, capped at the catalogue, is the ANN recall's cut-off).
        items (ItemTable): the whole catalogue.
        out_dir (str | Path): the export folder (versions and ``export.json``, as a ranking export's).
        parity_rows (pa.Table): held-out rows (the users whose embeddings are checked and whose queries
            measure the ANN index).
        ann_min_items (int): the smallest catalogue an HNSW index is built for.
        min_ann_recall (float): the HNSW index's recall@K against exact it must reach.

    Raises:
        ExportError: the user tower failed parity, an index check failed, or a part could not be written;
            nothing was published.

    Example::

        out = export_retrieval(model, spec, cfg, items, "runs/x/export", eval_rows)
        out.index["ann"]["recall_vs_exact"]        # ≥ 0.95 when an HNSW index was built
    """
    from recpipe.eval.retrieval import top_k_items
    from recpipe.models.protocol import MultiInterestModel

    if isinstance(model, MultiInterestModel):
        raise ExportError(
            f"{cfg.model.type}: a multi-interest user tower ((B, K, D) interests and their mask) has no export "
            "yet; the retrieval export writes a one-vector user tower and an index searched by one query per user"
        )
    model = model.eval()
    if parity_rows.num_rows == 0:
        raise ExportError("no held-out rows for the user tower's parity check")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clean_stale(out)
    staging = out / f"{STAGING_PREFIX}{uuid.uuid4().hex[:12]}"
    keys = spec.sparse_keys()
    tower = UserTower(model, keys).eval()
    dense, values, lengths = _kjt_tensors(spec, parity_rows)
    with torch.no_grad():
        users = tower(dense, values, lengths).numpy()
    embeddings = catalogue_embeddings(model, spec, items, parity_rows.schema)
    result = RetrievalExportOutcome(
        out_dir=str(out), items=int(embeddings.shape[0]), dim=int(embeddings.shape[1])
    )
    info = {
        "name": cfg.name,
        "type": cfg.model.type,
        "class": type(model).__name__,
        "config_digest": cfg.digest(),
        "spec_digest": spec.digest(),
        "similarity": str(getattr(model, "similarity", "inner_product")),
        "temperature": float(getattr(model, "temperature", 1.0)),
    }
    try:
        # A request's columns are checked against the user side's: the catalogue's attributes feed the item tower.
        item_columns = {items.item_id_field, *items.attr_fields}
        user_columns = [c for c in column_kinds(spec, with_labels=False) if c not in item_columns]
        # The catalogue's parts first: an index that misses its recall floor fails the export in seconds, before
        # the user tower's AOTInductor compile (~20 s of CPU on 2 cores); the index is measured with the eager
        # tower's user embeddings, which the compiled tower must then reproduce (its parity check).
        _write_item_embeddings(staging / ITEM_EMBEDDINGS, embeddings, items, info)
        stored = load_item_embeddings(staging / ITEM_EMBEDDINGS)[0]
        if not np.array_equal(stored, embeddings):
            raise ExportError("the stored item embeddings differ from the model's")
        k = min(max(cfg.eval.recall_at_k), embeddings.shape[0])
        exact = top_k_items(torch.from_numpy(users), torch.from_numpy(embeddings), k).numpy()
        result.index = _write_index(
            staging / INDEX, embeddings, users, exact, k, ann_min_items, min_ann_recall, info
        )
        _write_user_tower(staging / USER_TOWER, tower, spec, parity_rows, info, user_columns)
        result.user_tower_parity = _check_user_tower(staging / USER_TOWER, spec, parity_rows, users, cfg)
        version = new_version()
        result.folders = {
            n: str(version_folder(out, version) / n) for n in (USER_TOWER, ITEM_EMBEDDINGS, INDEX)
        }
        previous = read_pointer(out)
        publish(out, staging, version, result.to_dict())
        result.version, result.previous = version, previous["version"] if previous else None
    except ExportError:
        raise
    except (ArtifactError, faiss_index.AnnRecallError, OSError, RuntimeError) as err:
        raise ExportError(
            f"retrieval export failed, nothing was published: {type(err).__name__}: {err}"
        ) from err
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _seal(folder: Path, backend: str, info: dict, inputs: dict, outputs: dict, extra: dict) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            path.chmod(0o644)  # some writers use mkstemp (0600); a server may run as another user
    Manifest(
        backend=backend, files=record_files(folder), inputs=inputs, outputs=outputs, model=info, extra=extra
    ).write(folder)


def _write_user_tower(
    folder: Path, tower: UserTower, spec: FeatureSpec, rows: pa.Table, info: dict, user_columns: list[str]
) -> None:
    from recpipe.export.aoti import export_full_model, write_aoti

    folder.mkdir(parents=True)
    spec.save(folder / "fg.json")
    example = _kjt_tensors(spec, rows.slice(0, min(rows.num_rows, 64)))
    write_aoti(folder, export_full_model(tower, len(tower.keys), example))
    inputs = {
        "kind": "kjt",
        "keys": tower.keys,
        "dense": {"dtype": "float32", "shape": ["B", spec.dense_dim]},
        "values": {"dtype": "int64", "shape": ["N"]},
        "lengths": {"dtype": "int32", "shape": [f"{len(tower.keys)}*B"], "layout": "key-major (F, B)"},
    }
    outputs = {"user_embedding": {"dtype": "float32", "shape": ["B", "D"]}}
    extra = {"needs_fbgemm": "1", "package": PACKAGE, "user_columns": user_columns}
    _seal(folder, USER_TOWER, info, inputs, outputs, extra)


def load_user_tower(folder: str | Path) -> Any:
    """The user tower of a verified export folder: a callable ``(dense, values, lengths) → (B, D)``.

    Raises:
        ArtifactError: the folder fails verification, or its package was compiled with another torch.
    """
    import fbgemm_gpu  # noqa: F401  (the compiled tower calls torch.ops.fbgemm)

    manifest = read_manifest(folder, verify=True)
    if manifest.versions.get("torch") != torch.__version__:
        raise ArtifactError(
            f"{folder}: the user tower was compiled with torch {manifest.versions.get('torch')}, this is torch "
            f"{torch.__version__}; re-export it"
        )
    from recpipe.export.aoti import load_package
    from recpipe.export.layout import backend_folder

    return load_package(backend_folder(folder) / PACKAGE)


def _check_user_tower(
    folder: Path, spec: FeatureSpec, rows: pa.Table, eager: np.ndarray, cfg: RecpipeConfig
) -> dict[str, Any]:
    """The loaded package's embeddings against the eager tower's, batch by batch; the report in the manifest."""
    runner = load_user_tower(folder)
    t0 = time.perf_counter()
    got = []
    for a, b in _parity_chunks(rows.num_rows):
        dense, values, lengths = _kjt_tensors(spec, rows.slice(a, b - a))
        with torch.no_grad():
            got.append(runner(dense, values, lengths).numpy())
    diff = float(np.abs(np.concatenate(got) - eager).max())
    tolerance = cfg.export.max_abs_logit_diff
    report = {
        "rows": rows.num_rows,
        "batch_sizes": sorted({b - a for a, b in _parity_chunks(rows.num_rows)}),
        "max_abs_diff": diff,
        "tolerance": tolerance,
        "passed": diff <= tolerance,
        "seconds": round(time.perf_counter() - t0, 3),
    }
    manifest = read_manifest(folder, verify=False)
    manifest.parity = report
    manifest.write(folder)
    if not report["passed"]:
        raise ExportError(
            f"the user tower failed parity on {rows.num_rows} rows: max |Δembedding| = {diff:.3g} (allowed "
            f"{tolerance:g}); nothing was exported"
        )
    return report


def _write_item_embeddings(folder: Path, embeddings: np.ndarray, items: ItemTable, info: dict) -> None:
    from safetensors.numpy import save_file

    folder.mkdir(parents=True)
    save_file({"embeddings": np.ascontiguousarray(embeddings)}, str(folder / EMBEDDINGS_FILE))
    ids = items.attrs.column(items.item_id_field).combine_chunks()
    pq.write_table(pa.table({items.item_id_field: ids}), folder / IDS_FILE)
    pq.write_table(items.table.combine_chunks(), folder / ATTRIBUTES_FILE)
    outputs = {
        "embeddings": {"dtype": "float32", "shape": [int(embeddings.shape[0]), int(embeddings.shape[1])]}
    }
    extra = {
        "item_id_field": items.item_id_field,
        "ids_file": IDS_FILE,
        "attributes_file": ATTRIBUTES_FILE,
        "attribute_columns": list(items.table.column_names),
        "rows": "row j is the item of item_ids row j (and of item_attributes row j)",
    }
    _seal(folder, ITEM_EMBEDDINGS, info, {}, outputs, extra)


def load_item_embeddings(folder: str | Path) -> tuple[np.ndarray, pa.Array]:
    """``(embeddings (N, D) float32, item ids (N,))`` of a verified export folder."""
    from safetensors.numpy import load_file

    from recpipe.export.layout import backend_folder

    manifest = read_manifest(folder, verify=True)
    real = backend_folder(folder)
    emb = load_file(str(real / EMBEDDINGS_FILE))["embeddings"]
    ids = pq.read_table(real / IDS_FILE).column(manifest.extra["item_id_field"]).combine_chunks()
    if len(ids) != emb.shape[0]:
        raise ArtifactError(f"{real}: {emb.shape[0]} embeddings but {len(ids)} item ids")
    return emb, ids


def load_item_attributes(folder: str | Path) -> pa.Table:
    """The catalogue's columns (row ``j``: the item of embedding row ``j``) of a verified export folder.

    Raises:
        ArtifactError: the folder fails verification, it predates the attributes (re-export it), or their ids
            are not the embeddings' item ids row by row.
    """
    from recpipe.export.layout import backend_folder

    manifest = read_manifest(folder, verify=True)
    name = manifest.extra.get("attributes_file")
    real = backend_folder(folder)
    if not name:
        raise ArtifactError(
            f"{real}: the export has no item attributes (exported before they were kept); re-export the "
            "retrieval version to rank its candidates"
        )
    table = pq.read_table(real / name)
    id_field = manifest.extra["item_id_field"]
    ids = pq.read_table(real / IDS_FILE).column(id_field).combine_chunks()
    if id_field not in table.column_names or not table.column(id_field).combine_chunks().equals(ids):
        raise ArtifactError(
            f"{real}: {name}'s {id_field!r} column is not the item ids of {IDS_FILE} row by row"
        )
    return table


def _write_index(
    folder: Path,
    embeddings: np.ndarray,
    users: np.ndarray,
    exact: np.ndarray,
    k: int,
    ann_min_items: int,
    min_ann_recall: float,
    info: dict,
) -> dict[str, Any]:
    """Write the flat (and, for a large catalogue, HNSW) index, seal the folder, read it back, check both."""
    folder.mkdir(parents=True)
    flat = faiss_index.flat_index(embeddings)
    faiss_index.write_index(flat, folder / faiss_index.FLAT_FILE)
    n = embeddings.shape[0]
    ann: dict[str, Any]
    if n >= ann_min_items:
        flat_rows = faiss_index.search(flat, users, k)[1]
        index, report = faiss_index.hnsw_index(embeddings, users, k, flat_rows, min_ann_recall)
        faiss_index.write_index(index, folder / report.file)
        ann = report.to_dict()
    else:
        ann = {
            "kind": None,
            "reason": f"{n} items < ann_min_items {ann_min_items}: the flat index is exact and fast",
        }
    extra = {"metric": "inner_product", "flat": faiss_index.FLAT_FILE, "ann": ann, "items": n}
    _seal(
        folder,
        INDEX,
        info,
        {"query": {"dtype": "float32", "shape": ["Q", int(embeddings.shape[1])]}},
        {},
        extra,
    )
    # read back verified, as a server would, and check what was read
    manifest = read_manifest(folder, verify=True)
    flat = faiss_index.read_index(folder / faiss_index.FLAT_FILE)
    scores, _ = faiss_index.search(flat, users, k)
    want = np.take_along_axis(users @ embeddings.T, exact, axis=1)
    flat_diff = float(np.abs(scores - want).max())  # scores, not ids: tied items may come in either order
    if flat_diff > 1e-4:
        raise ExportError(f"the flat index's top-{k} scores differ from brute force by {flat_diff:.3g}")
    if ann.get("kind"):
        index = faiss_index.read_index(folder / ann["file"], ann["params"]["ef_search"])
        again = faiss_index.recall_vs_exact(
            faiss_index.search(flat, users, k)[1], faiss_index.search(index, users, k)[1]
        )
        if again < min_ann_recall:
            raise ExportError(
                f"the stored HNSW index's recall@{k} vs exact is {again:.4f} < {min_ann_recall}"
            )
    return {
        "flat": {"file": faiss_index.FLAT_FILE, "max_abs_score_diff": flat_diff, "k": k},
        "ann": manifest.extra["ann"],
    }


def export_retrieval_checkpoint(
    ckpt_dir: str | Path,
    out_dir: str | Path,
    data_uri: str,
    environ: Any = None,
    ann_min_items: int = faiss_index.ANN_MIN_ITEMS,
) -> RetrievalExportOutcome:
    """:func:`export_retrieval` of a training checkpoint: its model, FeatureSpec and config, the catalogue of
    its ``data.negative_sampler``, the first rows of ``data_uri`` for parity.

    Raises:
        ValueError: the config has no ``data.negative_sampler``.
    """
    import os

    from recpipe.data.negative_sampler import load_item_table
    from recpipe.export.api import read_rows
    from recpipe.train.checkpoint import load_model_for_inference

    model, spec, cfg = load_model_for_inference(ckpt_dir)
    if cfg.data.negative_sampler is None:
        raise ValueError(
            f"{ckpt_dir}: model {cfg.model.type!r} has no data.negative_sampler (the catalogue to index)"
        )
    items = load_item_table(
        cfg.data.negative_sampler, cfg.data.params, os.environ if environ is None else environ
    )
    rows = read_rows(data_uri, spec, csv=cfg.csv_options())
    return export_retrieval(model, spec, cfg, items, out_dir, rows, ann_min_items=ann_min_items)
