"""How a training job starts: one plain process or ``torchrun`` here (:mod:`~recpipe.launch.local`), or
a Kubeflow PyTorchJob across pods (:mod:`~recpipe.launch.cluster`; its manifest:
:mod:`~recpipe.launch.pytorchjob`).

Every launcher runs the same worker command (:func:`~recpipe.launch.command.worker_command`); the trainer
itself (:mod:`recpipe.train`) never imports this package. Which launcher runs is the caller's explicit
choice (``launcher`` of the train stage), never read from the environment.

This package imports nothing (the worker every launcher starts, :mod:`recpipe.launch.worker`, lives here too and
must not pay for the launchers): import from the modules.

Example::

    from recpipe.launch.local import launch_local
    launch_local("configs/din_taobao_small.yaml", "data/train", "data/eval", "runs/x", nproc_per_node=2)
"""
