"""The one outcome of an export: every backend ``ok``, ``skipped`` or ``failed``, with its folder, the reason,
the seconds it took and its parity numbers; written to and read from the export's ``export.json``
(:data:`recpipe.export.layout.POINTER`).

:func:`recpipe.export.api.export` produces it (and publishes it as the pointer), the export stage returns
it, the register stage reads it back from the folder. Torch-free: reading an export's outcome loads no model.

The JSON keys are those of the ``export.json`` written before this module (``out_dir``, ``backends`` →
``{backend, status, folder, reason, parity, seconds}``, ``version``, ``previous``), so older exports read the
same.

Example::

    outcome = read_outcome("runs/x/export")
    outcome.backends["rtp"].parity.max_abs_logit_diff   # 4.8e-07
    outcome.backends["trt"].status                      # 'skipped' on a CPU machine
    outcome.describe()                                  # 'jit=parity ok: max|dlogit| 3.1e-07 on 1028 rows, ...'
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from recpipe.export.backends import BACKENDS
from recpipe.export.layout import POINTER
from recpipe.export.manifest import ParityReport

Status = Literal["ok", "skipped", "failed"]


@dataclass
class BackendOutcome:
    """One backend's outcome.

    Args:
        backend (str): its name (:data:`~recpipe.export.backends.BACKENDS`).
        status (str): ``ok`` (built and passed parity), ``skipped`` (this machine cannot build it) or
            ``failed``.
        folder (str | None): its folder in the export's version (None when nothing was written).
        reason (str | None): why it was skipped or failed.
        parity (ParityReport | None): how it compared with the eager model (``ok`` backends).
        seconds (float): wall time of its build and parity check.
    """

    backend: str
    status: Status
    folder: str | None = None
    reason: str | None = None
    parity: ParityReport | None = None
    seconds: float = 0.0

    @property
    def max_abs_logit_diff(self) -> float | None:
        return None if self.parity is None else float(self.parity.max_abs_logit_diff)

    def parity_text(self) -> str:
        """``parity ok: max|dlogit| 3.1e-07 on 1028 rows``, or ``skipped (<reason>)``."""
        if self.status != "ok" or self.parity is None:
            return f"{self.status} ({self.reason})"
        rows = f" on {self.parity.rows} rows" if self.parity.rows else ""
        return f"parity ok: max|dlogit| {self.parity.max_abs_logit_diff:.2g}{rows}"

    @classmethod
    def from_dict(cls, name: str, data: dict[str, Any]) -> BackendOutcome:
        parity = data.get("parity")
        known = {f.name for f in fields(ParityReport)}
        return cls(
            backend=data.get("backend", name),
            status=data["status"],
            folder=data.get("folder"),
            reason=data.get("reason"),
            parity=ParityReport(**{k: v for k, v in parity.items() if k in known}) if parity else None,
            seconds=float(data.get("seconds") or 0.0),
        )


@dataclass
class ExportOutcome:
    """What an export produced, backend by backend in the order asked.

    Args:
        out_dir (str): the export folder.
        backends (dict[str, BackendOutcome]): each backend's outcome.
        version (str | None): the export's version folder (:mod:`recpipe.export.layout`), once published.
        previous (str | None): the version it replaced.
    """

    out_dir: str
    backends: dict[str, BackendOutcome] = field(default_factory=dict)
    version: str | None = None
    previous: str | None = None

    @property
    def ok(self) -> bool:
        """No backend failed (skipped ones are fine)."""
        return all(b.status in ("ok", "skipped") for b in self.backends.values())

    def describe(self) -> str:
        """``jit=parity ok: max|dlogit| 3.1e-07 on 1028 rows, trt=skipped (no CUDA)``."""
        return ", ".join(f"{name}={b.parity_text()}" for name, b in self.backends.items())

    def summary(self) -> str:
        """One line per backend, with its AUCs and seconds."""
        lines = []
        for name, b in self.backends.items():
            p = b.parity
            if b.status != "ok" or p is None:
                lines.append(f"{name}: {b.status} ({b.reason})")
            else:
                lines.append(
                    f"{name}: ok max|dlogit|={p.max_abs_logit_diff:.3g} auc={p.auc_backend:.4f} "
                    f"(eager {p.auc_eager:.4f}) rows={p.rows} {b.seconds:.1f}s"
                )
        return "\n".join(lines)

    def metadata(self) -> dict[str, str | float]:
        """Flat ``{backend: status}`` and ``{backend}_max_abs_logit_diff`` (KFP artifact metadata)."""
        out: dict[str, str | float] = {}
        for name, b in self.backends.items():
            out[name] = b.status
            if b.max_abs_logit_diff is not None:
                out[f"{name}_max_abs_logit_diff"] = b.max_abs_logit_diff
        return out

    def to_dict(self) -> dict[str, Any]:
        """The ``export.json`` content (without ``version``/``previous`` until published)."""
        data = asdict(self)
        for key in ("version", "previous"):
            if data[key] is None:
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], out_dir: str | Path = "") -> ExportOutcome:
        return cls(
            out_dir=str(data.get("out_dir") or out_dir),
            backends={n: BackendOutcome.from_dict(n, b) for n, b in (data.get("backends") or {}).items()},
            version=data.get("version"),
            previous=data.get("previous"),
        )


def skipped_here(names: Iterable[str]) -> dict[str, BackendOutcome]:
    """The backends of ``names`` this machine cannot build (``trt`` without CUDA/TensorRT), each ``skipped``
    with the reason: the one place that asks :meth:`~recpipe.export.backends.Backend.unavailable_reason`."""
    return {
        n: BackendOutcome(n, "skipped", reason=reason)
        for n in names
        if (reason := BACKENDS[n].unavailable_reason())
    }


def read_outcome(root: str | Path) -> ExportOutcome | None:
    """The outcome recorded in ``root``'s ``export.json``; None when there is none (or it is not JSON)."""
    path = Path(root) / POINTER
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return ExportOutcome.from_dict(data, root) if isinstance(data, dict) else None
