"""How a training job starts: one plain process or ``torchrun`` here (:mod:`~recpipe.launch.local`), or
a Kubeflow PyTorchJob across pods (:mod:`~recpipe.launch.cluster`; its manifest:
:mod:`~recpipe.launch.pytorchjob`).

Every launcher runs the same worker command (:func:`~recpipe.launch.command.worker_command`); the trainer
itself (:mod:`recpipe.train`) never imports this package. Which launcher runs is the caller's explicit
choice (``launcher`` of the train stage), never read from the environment.

Example::

    from recpipe.launch import launch_local
    launch_local("configs/din_taobao_small.yaml", "data/train", "data/eval", "runs/x", nproc_per_node=2)
"""

from recpipe.launch.cluster import launch_pytorchjob
from recpipe.launch.command import WORKER_MODULE, worker_command
from recpipe.launch.errors import LaunchError, TrainingFailed
from recpipe.launch.local import launch_local, local_world

# "local": this machine (one process, or torchrun); "pytorchjob": a Kubeflow PyTorchJob across pods.
LAUNCHERS = ("local", "pytorchjob")

__all__ = [
    "LAUNCHERS",
    "WORKER_MODULE",
    "LaunchError",
    "TrainingFailed",
    "launch_local",
    "launch_pytorchjob",
    "local_world",
    "worker_command",
]
