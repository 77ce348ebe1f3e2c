"""Embedding memory and all-to-all traffic: what the tables, their optimizer state and the zch
(managed-collision) remapping buffers cost, and how many bytes one training step moves between ranks
(shared/seeds section 3 and 5.1)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from recpipe.features.spec import FeatureSpec, TableSpec

FLOAT_BYTES = 4
# A zch table's remapping module (recpipe.models.blocks.embedding.managed_collision_ec) keeps four int64 per row:
# sorted id keys, their rows, and DistanceLFU's counts and last-access steps; LFU keeps only the counts, LRU only
# the last-access steps (TableSpec.zch_eviction_policy).
ZCH_BYTES_PER_ROW = 4 * 8
ZCH_POLICY_BYTES_PER_ROW = {"distance_lfu": ZCH_BYTES_PER_ROW, "lfu": 3 * 8, "lru": 3 * 8}
MIB = 1 << 20
GIB = 1 << 30


def admission_bytes(table: TableSpec) -> int:
    """Bytes of a zch table's frequency-admission counter: a key and a count (int64 each) per slot, the
    capacity rounded up to whole slots per row (:meth:`ZchAdmission.slots`)."""
    a = table.zch_admission
    return 0 if a is None else table.num_embeddings * a.slots(table.num_embeddings) * 2 * 8


def optimizer_state_bytes(optimizer: str, rows: int, dim: int) -> int:
    """Bytes of fused sparse-optimizer state for one ``rows × dim`` float32 table.

    Adagrad keeps one accumulator per weight (same size as the table), row-wise Adagrad one float per
    row (``dim``× less), Adam two moments per weight, SGD nothing.

    Example::

        >>> optimizer_state_bytes("rowwise_adagrad", 1000, 16)
        4000
    """
    per_row = {"adagrad": dim, "rowwise_adagrad": 1, "adam": 2 * dim, "sgd": 0}
    if optimizer not in per_row:
        raise ValueError(f"unknown sparse optimizer {optimizer!r}; known: {sorted(per_row)}")
    return rows * per_row[optimizer] * FLOAT_BYTES


@dataclass(frozen=True)
class TableMemory:
    """One embedding table: ``rows × dim`` float32 weights plus its optimizer state, and for a zch table
    its id→row remapping buffers (``zch_bytes``, 0 otherwise)."""

    name: str
    rows: int
    dim: int
    weight_bytes: int
    optimizer_bytes: int
    zch_bytes: int = 0


@dataclass(frozen=True)
class EmbeddingMemoryReport:
    """Embedding memory of a FeatureSpec under one sparse optimizer (float32, before sharding).

    Example::

        r = embedding_memory_report(spec, "adagrad")
        r.total_rows, r.weight_bytes / 2**20      # 4463850, 272.5 for configs/din_taobao.yaml
        print(r.format())
    """

    optimizer: str
    tables: list[TableMemory]

    @property
    def total_rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def weight_bytes(self) -> int:
        return sum(t.weight_bytes for t in self.tables)

    @property
    def optimizer_bytes(self) -> int:
        return sum(t.optimizer_bytes for t in self.tables)

    @property
    def zch_bytes(self) -> int:
        return sum(t.zch_bytes for t in self.tables)

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.optimizer_bytes + self.zch_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer,
            "tables": [asdict(t) for t in self.tables],
            "total_rows": self.total_rows,
            "weight_bytes": self.weight_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "zch_bytes": self.zch_bytes,
            "total_bytes": self.total_bytes,
        }

    def summary(self, largest: int = 3) -> str:
        """One line: tables, rows and MiB in total, with the ``largest`` tables named.

        Args:
            largest (int): tables named, largest first.
        """
        top = sorted(self.tables, key=lambda t: -t.weight_bytes)[:largest]
        named = ", ".join(f"{t.name} {t.weight_bytes / MIB:.1f}" for t in top)
        more = ", …" if len(self.tables) > largest else ""
        zch = f" + zch {self.zch_bytes / MIB:.1f}" if self.zch_bytes else ""
        return (
            f"embedding memory: {len(self.tables)} table(s), {self.total_rows:,} rows, "
            f"{self.total_bytes / MIB:.1f} MiB (weights {self.weight_bytes / MIB:.1f} + {self.optimizer} "
            f"{self.optimizer_bytes / MIB:.1f}{zch}; largest MiB: {named}{more})"
        )

    def format(self) -> str:
        """A fixed-width table, largest tables first, with a total line (a zch column when any table is zch)."""
        zch = any(t.zch_bytes for t in self.tables)

        def zch_col(b: int) -> str:
            return f" {b / MIB:>8.1f}" if zch else ""

        lines = [f"embedding memory (float32, sparse optimizer {self.optimizer}):"]
        head = f"  {'table':<24} {'rows':>12} {'dim':>4} {'weights MiB':>12} {'optim MiB':>10}"
        lines.append(head + (f" {'zch MiB':>8}" if zch else ""))
        for t in sorted(self.tables, key=lambda t: -t.weight_bytes):
            lines.append(
                f"  {t.name:<24} {t.rows:>12,} {t.dim:>4} {t.weight_bytes / MIB:>12.1f} "
                f"{t.optimizer_bytes / MIB:>10.1f}{zch_col(t.zch_bytes)}"
            )
        lines.append(
            f"  {'total':<24} {self.total_rows:>12,} {'':>4} {self.weight_bytes / MIB:>12.1f} "
            f"{self.optimizer_bytes / MIB:>10.1f}{zch_col(self.zch_bytes)}   = {self.total_bytes / MIB:.1f} MiB"
        )
        return "\n".join(lines)


def embedding_memory_report(spec: FeatureSpec, optimizer: str) -> EmbeddingMemoryReport:
    """Per-table ``rows × dim × 4`` bytes of weights and the ``optimizer``'s state, for every table of
    ``spec``, and ``rows × 32`` bytes of remapping buffers for each zch table (the per-step history
    buffers, a few bytes per id of one batch, are not counted).

    Args:
        spec (FeatureSpec): the tables (shared tables counted once).
        optimizer (str): ``adagrad``, ``rowwise_adagrad``, ``adam`` or ``sgd``.
    """
    tables = [
        TableMemory(
            name=t.name,
            rows=t.num_embeddings,
            dim=t.embedding_dim,
            weight_bytes=t.num_embeddings * t.embedding_dim * (2 if t.data_type == "fp16" else FLOAT_BYTES),
            optimizer_bytes=optimizer_state_bytes(optimizer, t.num_embeddings, t.embedding_dim),
            zch_bytes=t.num_embeddings * ZCH_POLICY_BYTES_PER_ROW[t.zch_eviction_policy] + admission_bytes(t)
            if t.zch_size is not None
            else 0,
        )
        for t in spec.tables()
    ]
    return EmbeddingMemoryReport(optimizer=optimizer, tables=tables)


class OversizeError(ValueError):
    """The embedding tables and their optimizer state do not fit the memory of the planned devices."""


@dataclass(frozen=True)
class DeviceMemory:
    """Memory the planned devices hold for embedding tables.

    Args:
        per_device_bytes (int): one GPU's HBM, or one host's RAM on CPU.
        devices (int): GPUs in the world, or hosts on CPU (the ranks of a host share its RAM).
        what (str): where the numbers come from, for messages.
    """

    per_device_bytes: int
    devices: int
    what: str

    @property
    def total_bytes(self) -> int:
        return self.per_device_bytes * self.devices


def host_ram_bytes() -> int:
    """This machine's physical RAM."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def planned_device_memory(device: str, world_size: int, local_world_size: int | None = None) -> DeviceMemory:
    """The memory of the devices the sharding planner places tables on: HBM per GPU as its topology
    takes it (this machine's GPU when there is one, else torchrec's default ``HBM_CAP``), host RAM on CPU.

    Args:
        device (str): ``"cuda"`` or ``"cpu"``.
        world_size (int): ranks.
        local_world_size (int | None): ranks per host (default: all on this one).
    """
    if device == "cuda":
        import torch
        from torchrec.distributed.planner.constants import HBM_CAP

        if torch.cuda.is_available():
            hbm, what = torch.cuda.get_device_properties(0).total_memory, torch.cuda.get_device_name(0)
        else:
            hbm, what = HBM_CAP, "the sharding planner's default HBM"
        return DeviceMemory(hbm, world_size, f"{world_size} GPU(s) × {hbm / GIB:.1f} GiB HBM ({what})")
    hosts = -(-world_size // (local_world_size or world_size))
    ram = host_ram_bytes()
    return DeviceMemory(ram, hosts, f"{hosts} host(s) × {ram / GIB:.1f} GiB RAM")


def check_fits(report: EmbeddingMemoryReport, available: DeviceMemory) -> None:
    """Refuse tables (plus optimizer state and zch buffers) larger than the planned devices' memory,
    before any of it is allocated.

    Args:
        report (EmbeddingMemoryReport): what the tables need.
        available (DeviceMemory): what the devices hold (:func:`planned_device_memory`).

    Raises:
        OversizeError: the per-table sizes, the total and what is available, and the ways out.
    """
    if report.total_bytes <= available.total_bytes:
        return
    raise OversizeError(
        f"the embedding tables need {report.total_bytes / GIB:.1f} GiB but the planned devices hold "
        f"{available.total_bytes / GIB:.1f} GiB ({available.what}); nothing was allocated.\n"
        f"{report.format()}\n"
        "Lower num_buckets / hash_bucket_size, use more devices, or --set train.allow_oversize=true "
        "to try anyway."
    )


@dataclass(frozen=True)
class AllToAllVolume:
    """Embedding all-to-all bytes of one forward pass (the backward gradient all-to-all is the same size).

    Args:
        per_rank_bytes (int): embedding output one rank receives: ``B/W × F × V × D × 4``.
        remote_bytes (int): the part that crosses to another rank, ``(W − 1)/W`` of it.
        per_message_bytes (int): one of the ``W − 1`` point-to-point pieces, ``remote / (W − 1)``.
    """

    per_rank_bytes: int
    remote_bytes: int
    per_message_bytes: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def all_to_all_volume(
    global_batch_size: int,
    world_size: int,
    num_features: int,
    avg_values: float,
    dim: int,
    bytes_per_value: int = FLOAT_BYTES,
) -> AllToAllVolume:
    """The seed's section 5.1 formula: every rank receives the embeddings of its ``B/W`` rows for all
    ``F`` features, ``V`` values each of width ``D``; ``(W − 1)/W`` of them come from other ranks.

    For pooled features ``V = 1`` (EmbeddingBag output is one vector per row); for sequence features
    ``V`` is the mean history length. The formula holds for table-wise and row-wise sharding alike:
    the bytes a rank needs do not depend on where the rows live.

    Args:
        global_batch_size (int): ``B``, rows per step over all ranks.
        world_size (int): ranks ``W``.
        num_features (int): features ``F``.
        avg_values (float): mean values per feature and row ``V``.
        dim (int): embedding dim ``D``.
        bytes_per_value (int): 4 for float32, 2 for fp16/bf16 communication.

    Example::

        >>> v = all_to_all_volume(8192, 8, 15, 2, 16)
        >>> round(v.per_rank_bytes / 1e6, 2), round(v.remote_bytes / 1e6, 2), v.per_message_bytes // 1000
        (1.97, 1.72, 245)
    """
    if global_batch_size < 1 or world_size < 1 or num_features < 0 or avg_values < 0 or dim < 1:
        raise ValueError(
            f"need global_batch_size >= 1, world_size >= 1, num_features >= 0, avg_values >= 0, dim >= 1; "
            f"got {global_batch_size}, {world_size}, {num_features}, {avg_values}, {dim}"
        )
    per_rank = round(global_batch_size / world_size * num_features * avg_values * dim * bytes_per_value)
    remote = per_rank * (world_size - 1) // world_size
    per_message = remote // (world_size - 1) if world_size > 1 else 0
    return AllToAllVolume(per_rank_bytes=per_rank, remote_bytes=remote, per_message_bytes=per_message)
