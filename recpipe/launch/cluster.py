"""Multi-node training as a Kubeflow PyTorchJob: stage inputs on a shared volume, create the job, stream
the master's log, wait, and bring the checkpoint back (or fail with the job's error).

Only this module talks to the Kubernetes API (``kubernetes`` Python client); the manifest is built by
:mod:`recpipe.launch.pytorchjob`, the pods' command by :func:`recpipe.launch.command.worker_command`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from recpipe.features.spec import FG_JSON
from recpipe.launch.command import worker_command
from recpipe.launch.errors import TrainingFailed
from recpipe.launch.pytorchjob import (
    GROUP,
    PLURAL,
    VERSION,
    JobResources,
    Placement,
    build_pytorchjob,
    job_condition,
    job_name,
)
from recpipe.launch.secrets import JOB_SECRETS, secret_env

WORKSPACE_MOUNT = "/workspace"
POLL_SECONDS = 10.0
LOG_TAIL_LINES = 60
_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def current_namespace(default: str = "kubeflow") -> str:
    try:
        return _NAMESPACE_FILE.read_text().strip() or default
    except OSError:
        return os.environ.get("POD_NAMESPACE", default)


def job_command(worker: Sequence[str]) -> list[str]:
    """The pods' container command: the worker under torchrun. The operator sets ``PET_NNODES``,
    ``PET_NPROC_PER_NODE``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` and ``PET_MASTER_PORT``, which torchrun
    reads as the defaults of its flags, so they are not repeated here.

    Args:
        worker (Sequence[str]): :func:`~recpipe.launch.command.worker_command`'s arguments.
    """
    return ["torchrun", "--max-restarts", "0", *worker]


def _clients() -> tuple[Any, Any]:
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CustomObjectsApi(), client.CoreV1Api()


def _stage_inputs(
    job_dir: Path, config_path: str, train_dir: str, eval_dir: str, fg_json: str | None
) -> dict[str, str]:
    """Copy the step's inputs onto the shared volume, where every pod of the job can read them."""
    job_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "config": str(job_dir / "config.yaml"),
        "train": str(job_dir / "train"),
        "eval": str(job_dir / "eval"),
    }
    shutil.copyfile(config_path, paths["config"])
    for src, key in ((train_dir, "train"), (eval_dir, "eval")):
        shutil.copytree(src, paths[key], dirs_exist_ok=True)
    if fg_json:
        paths["fg"] = str(job_dir / FG_JSON)
        shutil.copyfile(fg_json, paths["fg"])
    paths["out"] = str(job_dir / "out")
    return paths


def _master_pod(core: Any, namespace: str, name: str) -> str | None:
    selector = f"training.kubeflow.org/job-name={name},training.kubeflow.org/replica-type=master"
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return pods[0].metadata.name if pods else None


def _stream_logs(
    core: Any, namespace: str, pod: str, sink: Callable[[str], None], stop: threading.Event
) -> None:
    """Follow ``pod``'s log into ``sink`` until it ends (or ``stop`` is set)."""
    try:
        resp = core.read_namespaced_pod_log(
            pod, namespace, container="pytorch", follow=True, _preload_content=False
        )
        for chunk in resp.stream():
            if stop.is_set():
                break
            for line in chunk.decode(errors="replace").splitlines():
                sink(f"[{pod}] {line}")
        resp.release_conn()
    except Exception as err:  # noqa: BLE001 - losing the log must not fail the training
        sink(f"[{pod}] (log stream ended: {err})")


def _failure_details(core: Any, namespace: str, name: str) -> str:
    """The last log lines of every failed pod of the job."""
    selector = f"training.kubeflow.org/job-name={name}"
    out = []
    for pod in core.list_namespaced_pod(namespace, label_selector=selector).items:
        if pod.status.phase != "Failed":
            continue
        try:
            tail = core.read_namespaced_pod_log(
                pod.metadata.name, namespace, container="pytorch", tail_lines=LOG_TAIL_LINES
            )
        except Exception as err:  # noqa: BLE001
            tail = f"(no log: {err})"
        out.append(f"--- {pod.metadata.name} (failed) ---\n{tail}")
    return "\n".join(out)


def wait_for_job(
    custom: Any,
    core: Any,
    namespace: str,
    name: str,
    poll_s: float = POLL_SECONDS,
    timeout_s: float | None = None,
    sink: Callable[[str], None] = print,
) -> str:
    """Poll the job until it Succeeded (returns ``"Succeeded"``) or Failed (raises ``TrainingFailed`` with
    the condition's message and the failed pods' log tails), streaming the master's log meanwhile."""
    t0, last, stop = time.monotonic(), None, threading.Event()
    streamer: threading.Thread | None = None
    try:
        while True:
            job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            state, message = job_condition(job.get("status"))
            if state != last:
                sink(f"PyTorchJob {namespace}/{name}: {state}{': ' + message if message else ''}")
                last = state
            if streamer is None and state in ("Running", "Succeeded", "Failed"):
                pod = _master_pod(core, namespace, name)
                if pod:
                    streamer = threading.Thread(
                        target=_stream_logs, args=(core, namespace, pod, sink, stop), daemon=True
                    )
                    streamer.start()
            if state == "Succeeded":
                return state
            if state == "Failed":
                raise TrainingFailed(
                    f"PyTorchJob {namespace}/{name} failed: {message}\n{_failure_details(core, namespace, name)}"
                )
            if timeout_s is not None and time.monotonic() - t0 > timeout_s:
                raise TrainingFailed(
                    f"PyTorchJob {namespace}/{name} did not finish within {timeout_s:.0f}s (state {state})"
                )
            time.sleep(poll_s)
    finally:
        if streamer is not None:
            streamer.join(timeout=30)
        stop.set()


def launch_pytorchjob(
    config_path: str,
    train_dir: str,
    eval_dir: str,
    out_dir: str,
    fg_json: str | None,
    workers: int,
    gpus_per_worker: int,
    image: str,
    workspace_pvc: str,
    accelerator: str = "nvidia.com/gpu",
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[Mapping[str, Any]] | None = None,
    namespace: str | None = None,
    overrides: Mapping[str, Any] | None = None,
    timeout_s: float | None = None,
) -> tuple[str, int]:
    """Train on ``workers`` pods × ``gpus_per_worker`` GPUs; returns (``"pytorchjob/<ns>/<name>"``, world size).

    Args:
        config_path (str), train_dir (str), eval_dir (str), fg_json (str | None): the inputs, copied onto the
            shared volume where every pod reads them.
        out_dir (str): where the checkpoint folder is brought back to.
        workers (int): pods (one Master, ``workers - 1`` Workers).
        gpus_per_worker (int): GPUs per pod = torchrun processes per pod (0: one CPU process, gloo).
        image (str): the pods' image (the recpipe CUDA image).
        workspace_pvc (str): ReadWriteMany claim mounted at ``WORKSPACE_MOUNT`` here and in every pod.
        accelerator (str): GPU resource name.
        node_selector (Mapping | None), tolerations (Sequence | None): placement of the pods.
        namespace (str | None): the job's namespace (default: this pod's).
        overrides (Mapping | None): dotted config overrides for the worker.
        timeout_s (float | None): give up (and delete the job) after this many seconds.

    Raises:
        ValueError: no ``workspace_pvc`` or no ``image``.
        TrainingFailed: the job failed or timed out (it is deleted).
    """
    if not workspace_pvc:
        raise ValueError("a PyTorchJob needs a ReadWriteMany PersistentVolumeClaim (workspace_pvc)")
    if not image:
        raise ValueError("a PyTorchJob needs an image")
    ns = namespace or current_namespace()
    name = job_name("recpipe-train", os.environ.get("KFP_RUN_ID", "")[:20] + uuid.uuid4().hex[:8])
    job_dir = Path(WORKSPACE_MOUNT) / name
    paths = _stage_inputs(job_dir, config_path, train_dir, eval_dir, fg_json)
    nproc = max(1, gpus_per_worker)
    worker = worker_command(
        paths["config"], paths["train"], paths["out"], paths["eval"], paths.get("fg"), overrides
    )
    cmd = job_command(worker)
    manifest = build_pytorchjob(
        name,
        ns,
        image,
        cmd,
        workers,
        JobResources(gpus=gpus_per_worker, accelerator=accelerator),
        Placement(node_selector=dict(node_selector or {}), tolerations=list(tolerations or [])),
        secret_env=secret_env(JOB_SECRETS),
        workspace_pvc=workspace_pvc,
        workspace_mount=WORKSPACE_MOUNT,
        labels={"recpipe.io/kfp-run-id": os.environ.get("KFP_RUN_ID", "none")[:63] or "none"},
    )
    custom, core = _clients()
    print(
        f"creating PyTorchJob {ns}/{name}: {workers} pods x {gpus_per_worker} {accelerator}; {shlex.join(cmd)}"
    )
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, manifest)
    try:
        wait_for_job(custom, core, ns, name, timeout_s=timeout_s)
    except BaseException:
        # Cancelled or failed: free the GPUs now rather than at the job's TTL.
        try:
            custom.delete_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name, propagation_policy="Background"
            )
        except Exception as err:  # noqa: BLE001
            print(f"could not delete PyTorchJob {ns}/{name}: {err}")
        raise
    shutil.copytree(paths["out"], out_dir, dirs_exist_ok=True)
    shutil.rmtree(job_dir, ignore_errors=True)
    return f"pytorchjob/{ns}/{name}", workers * nproc
