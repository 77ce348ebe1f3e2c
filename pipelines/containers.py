"""``recpipe run --runner containers``: every step of the pipeline in its image, on this machine.

kfp.local's ``DockerRunner`` starts one container per task, with the command KFP's launcher would run on a
cluster (``python3 -m kfp.dsl.executor_main`` with the task's executor input) and the pipeline root mounted
at the same path. The engine is a Docker daemon (``DOCKER_HOST`` or ``/var/run/docker.sock``) or podman's
Docker-compatible API, served by ``podman system service`` for the length of the run. Each container runs
as the image's user (10001) on a read-only root filesystem with a writable ``/tmp``; the runs folder (the
pipeline root, the MLflow store ``mlflow.db`` and its artifacts; group 10001, see ``shared_runs_folder``) is
mounted at its own path, so the tracking URI and every artifact path mean the same inside the containers
and here.

The train step asks for ``CUDA_IMAGE``. No CUDA image can be built here (no CUDA base, no CUDA wheel index):
where it is missing, its tag is pointed at the CPU image in the local engine (as ``make local-run`` does in
the kind node), and the summary says so (``train in <CUDA tag> = <CPU tag>``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.image import CUDA_IMAGE, IMAGE

IMAGE_UID = 10001
RUN_LABEL = "io.recpipe.run"
TITLE_LABEL = "org.opencontainers.image.title"
CUDA_TITLE = "recpipe-cuda"  # images/cuda/Dockerfile's title
DOCKER_SOCKET = "/var/run/docker.sock"


class ContainerEngineError(RuntimeError):
    """No container engine is usable, or the images are not built."""


@dataclass
class ContainerRun:
    """What the container runner needs and reports: the engine, the run's label, the containers started."""

    engine: str
    label: str
    train_image: str
    containers: int = 0


def engine_name() -> str:
    """``docker`` when a Docker daemon answers, else ``podman`` when installed; raises naming what is missing."""
    if os.environ.get("DOCKER_HOST") or _answers(DOCKER_SOCKET):
        return "docker"
    if shutil.which("podman"):
        return "podman"
    raise ContainerEngineError(
        "no container engine: no Docker daemon answers (DOCKER_HOST, /var/run/docker.sock) and podman is not "
        "installed. `make images` installs podman on this machine kind (root, apt-get) and builds the images."
    )


def _answers(path: str) -> bool:
    if not Path(path).is_socket():
        return False
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(path)
        except OSError:
            return False
    return True


@contextmanager
def engine_api(timeout_s: float = 30.0) -> Iterator[str]:
    """Make ``docker.from_env()`` reach an engine for the block: the Docker daemon, or a ``podman system
    service`` started here and stopped at the end. Yields the engine's name."""
    name = engine_name()
    if name == "docker":
        yield name
        return
    folder = Path(tempfile.mkdtemp(prefix="recpipe-podman-"))
    sock = folder / "podman.sock"
    log = open(folder / "service.log", "w")  # noqa: SIM115 - closed below
    service = subprocess.Popen(
        ["podman", "system", "service", "--time=0", f"unix://{sock}"], stdout=log, stderr=subprocess.STDOUT
    )
    previous = os.environ.get("DOCKER_HOST")
    try:
        deadline = time.monotonic() + timeout_s
        while not _answers(str(sock)):
            if service.poll() is not None or time.monotonic() > deadline:
                raise ContainerEngineError(
                    f"podman system service did not start (exit {service.poll()}): "
                    f"{(folder / 'service.log').read_text()[-2000:]}"
                )
            time.sleep(0.2)
        os.environ["DOCKER_HOST"] = f"unix://{sock}"
        yield name
    finally:
        if previous is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = previous
        service.terminate()
        try:
            service.wait(timeout=15)
        except subprocess.TimeoutExpired:
            service.kill()
            service.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def prepare(engine: str, label: str) -> ContainerRun:
    """Check that the pipeline's images are in the engine; point ``CUDA_IMAGE`` at the CPU image where no
    CUDA build has that tag (again after each CPU rebuild). Raises ``ContainerEngineError`` naming a missing
    image and how to build it."""
    import docker

    client = docker.from_env()
    try:
        tags = {t for image in client.images.list() for t in image.tags}
        if IMAGE not in tags:
            raise ContainerEngineError(f"image {IMAGE} is not in {engine}: build it with `make images`")
        cpu = client.images.get(IMAGE)
        cuda = client.images.get(CUDA_IMAGE) if CUDA_IMAGE in tags else None
        # A CUDA tag that is not a CUDA build is an earlier alias: it follows the CPU image as rebuilt since.
        if cuda is None or (cuda.labels or {}).get(TITLE_LABEL) != CUDA_TITLE:
            repo, tag = CUDA_IMAGE.rsplit(":", 1)
            cpu.tag(repo, tag)
            return ContainerRun(engine=engine, label=label, train_image=f"{CUDA_IMAGE} = {IMAGE}")
        train_image = CUDA_IMAGE
    finally:
        client.close()
    return ContainerRun(engine=engine, label=label, train_image=train_image)


def runner_args(runs: Path, label: str) -> dict[str, Any]:
    """``DockerRunner`` arguments: the image's own user, a read-only root filesystem with a writable
    ``/tmp``, the runs folder mounted at its own path, and the run's label on every container."""
    from docker.types import Mount

    return {
        "read_only": True,
        "tmpfs": {"/tmp": "rw,exec,size=4g"},
        # torchrun's CPU ranks exchange tensors through shared memory (64 MB by default).
        "shm_size": "2g",
        "network_mode": "host",
        "mounts": [Mount(target=str(runs), source=str(runs), type="bind", read_only=False)],
        "labels": {RUN_LABEL: label},
    }


@contextmanager
def shared_runs_folder(runs: Path) -> Iterator[None]:
    """Let the containers (uid and gid 10001) write where this process writes, for the block.

    kfp.local creates each task's output folders here before the task's container writes into them. The
    runs folder and its folders get group 10001 with the setgid bit, so every folder created in them, here
    or in a container, inherits group 10001; this process creates them group-writable (umask 002) for the
    block. Nothing becomes writable by others. Needs the right to chown (root, with rootful podman or Docker);
    rootless podman maps this user into the container, and nothing needs changing.
    """
    if os.geteuid() != 0:
        yield
        return
    for path in [runs, *runs.rglob("*")]:
        if path.is_symlink():
            continue
        os.chown(path, -1, IMAGE_UID)
        mode = path.stat().st_mode
        path.chmod(mode | 0o020 | (0o2010 if path.is_dir() else 0))
    previous = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(previous)


def count_containers(label: str, since: float) -> int:
    """Containers the engine started with the run's label since ``since`` (its event log)."""
    import docker

    client = docker.from_env()
    try:
        events = client.events(
            since=int(since) - 1,
            until=int(time.time()) + 1,
            filters={"label": f"{RUN_LABEL}={label}", "event": "start", "type": "container"},
            decode=True,
        )
        return sum(1 for e in events if e.get("status", e.get("Action")) == "start")
    finally:
        client.close()
