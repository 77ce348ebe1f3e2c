"""Fixtures shared by every test folder: planted payloads for the tamper tests. Also gives each xdist worker
its share of the cores and keeps pytest's log capture off torch's structured-trace logger (below)."""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _a_share_of_the_cores_per_worker() -> None:
    """Under pytest-xdist, each worker and every process it starts (training ranks, pipeline steps, servers)
    get ``cores // workers`` threads through ``OMP_NUM_THREADS``, unless the caller exported one. Without it a
    lone training process takes every core while the other worker computes too, and OpenMP's threads spin on
    oversubscribed cores: tests/train/test_distributed.py's one- and two-rank runs took 134 s with 2 threads
    per process and 21 s with 1 (2 cores, load ~5). Set at conftest import, before torch is imported; the
    thread defaults themselves are tested with the environment given explicitly (tests/launch/test_local.py)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if workers > 0 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))


_a_share_of_the_cores_per_worker()


def _keep_pytest_handlers_off_torch_trace() -> None:
    """pytest (9.x) attaches its capture handlers to every non-propagating logger, torch's ``torch.__trace``
    included. torch builds a structured-trace payload whenever that logger has a handler. So under pytest,
    every graph that torch.export or AOTInductor compiled was also printed for a trace nobody reads: ~6 s of a
    52 s DeepFM AOTI export, none of it outside pytest. torch's own handler (which removes itself when no trace is
    asked for) is still accepted."""
    trace = logging.getLogger("torch.__trace")
    add = trace.addHandler

    def add_torch_handlers_only(handler: logging.Handler) -> None:
        if type(handler).__module__.startswith("torch"):
            add(handler)

    trace.addHandler = add_torch_handlers_only  # type: ignore[method-assign]


_keep_pytest_handlers_off_torch_trace()


class _TouchOnUnpickle:
    """Unpickling it creates ``marker``: the harmless stand-in for code run from a tampered file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (Path.touch, (self.marker,))


@dataclass
class Payload:
    """Builds files whose deserialization runs code that creates ``marker``."""

    marker: Path
    workdir: Path

    def pickle_bytes(self) -> bytes:
        """A pickle that touches the marker when unpickled."""
        return pickle.dumps(_TouchOnUnpickle(self.marker))

    def torch_bytes(self) -> bytes:
        """A ``torch.save`` file that touches the marker under ``torch.load(..., weights_only=False)``."""
        import io

        import torch

        buf = io.BytesIO()
        torch.save(_TouchOnUnpickle(self.marker), buf)
        return buf.getvalue()

    def shared_object(self) -> bytes:
        """A ``.so`` whose constructor touches the marker when it is loaded (``dlopen``)."""
        src = self.workdir / "payload.c"
        out = self.workdir / "payload.so"
        src.write_text(
            "#include <stdio.h>\n"
            "__attribute__((constructor)) static void run(void) {\n"
            f'  FILE *f = fopen("{self.marker}", "w"); if (f) fclose(f);\n'
            "}\n"
        )
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
        return out.read_bytes()

    def proven(self, data: bytes, load) -> None:  # noqa: ANN001
        """Assert that ``load(path)`` of ``data`` runs the payload (then remove the marker): the tamper
        test cannot pass just because its payload is inert."""
        probe = self.workdir / "probe.bin"
        probe.write_bytes(data)
        load(probe)
        assert self.marker.exists(), "the payload did not run when loaded directly"
        self.marker.unlink()


@pytest.fixture
def payload(tmp_path) -> Payload:
    work = tmp_path / "payload"
    work.mkdir()
    return Payload(marker=tmp_path / "PAYLOAD_RAN", workdir=work)


@pytest.fixture
def declare_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], None]:
    """Declare ``line`` (``"text_length = tests.features.toy_kind"``) in entry-point group ``group`` the way a
    package outside recpipe does: installed distribution metadata, found by this process and by the processes
    it starts (the trainer, the scoring server). Several calls add to one distribution."""
    site = tmp_path / "entry-point-site"
    info = site / "recpipe_test_declarations-0.dist-info"
    groups: dict[str, list[str]] = {}

    def declare(group: str, line: str) -> None:
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: recpipe-test-declarations\nVersion: 0\n")
        groups.setdefault(group, []).append(line)
        text = "".join(f"[{g}]\n" + "".join(f"{x}\n" for x in lines) for g, lines in groups.items())
        (info / "entry_points.txt").write_text(text)
        monkeypatch.syspath_prepend(str(site))
        # Processes started from here: the metadata, and the repository root that holds tests.*.
        monkeypatch.setenv(
            "PYTHONPATH", os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])
        )

    return declare


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files holding a slow test first, each file's tests in their order. Under ``make test`` the workers
    take files in this order (``--dist loadfile --no-loadscope-reorder``): xdist's own order, most tests
    first, started the one-test pipeline files last, and the suite's last minutes were one worker running
    a 4-minute file while the other idled."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


# --- Disk: what a passing module wrote under pytest's temporary directory goes when the module ends ----------
#
# CI ran out of disk 83% into the suite (Errno 28): pytest keeps every ``tmp_path`` and ``tmp_path_factory``
# directory until the session ends, and the suite's trained models, checkpoints, AOTInductor packages and
# MLflow stores add up to more than CI's disk. ``tmp_path`` directories of passing tests are removed at their
# teardown (``tmp_path_retention_policy = "failed"`` in pyproject.toml); the directories a module's fixtures
# made with ``tmp_path_factory.mktemp`` are removed here when the module ends, unless one of its tests failed
# (then they stay for reading, as pytest keeps a failed test's ``tmp_path``). Directories made while a
# session-scoped fixture is set up outlive every module and are left alone.

_SESSION_DIRS = pytest.StashKey[set]()
_FAILED_FILES = pytest.StashKey[set]()


def _children(base: Path) -> set[Path]:
    return set(base.iterdir()) if base.is_dir() else set()


class _SessionDirs:
    """Registered as a plugin (below), not a conftest hook: pytest calls a session-scoped fixture's setup hook
    through the session's hooks, which leave out conftest files below the root directory (this one)."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest):  # noqa: ANN201
        if fixturedef.scope != "session":
            yield
            return
        base = request.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
        before = _children(base)
        yield
        request.config.stash.setdefault(_SESSION_DIRS, set()).update(_children(base) - before)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_SessionDirs(), "recpipe-session-temp-dirs")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # noqa: ANN201, ARG001
    outcome = yield
    if outcome.get_result().failed:
        item.config.stash.setdefault(_FAILED_FILES, set()).add(item.path)


@pytest.fixture(scope="module", autouse=True)
def _module_temp_dirs_removed_when_the_module_passes(request: pytest.FixtureRequest, tmp_path_factory):  # noqa: ANN001
    """Set up before, and so torn down after, every other fixture of the module."""
    import shutil

    base = tmp_path_factory.getbasetemp()
    before = _children(base)
    yield
    config = request.config
    if request.path in config.stash.get(_FAILED_FILES, set()):
        return
    for path in _children(base) - before - config.stash.get(_SESSION_DIRS, set()):
        if path.is_symlink():  # pytest's "<name>current" link to the newest numbered directory
            path.unlink()
        else:
            shutil.rmtree(path, ignore_errors=True)
