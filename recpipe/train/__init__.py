"""Training: one trainer for 1..N processes (DistributedModelParallel, fused sparse optimizer,
TrainPipelineSparseDist), its per-process entry (:mod:`recpipe.train.worker`), DCP checkpoints, evaluation
and memory reports. How the processes are started is :mod:`recpipe.launch`'s business.

This package imports nothing, so a light importer (the launcher's ``free_port``) does not load torchrec:
import from the modules (``recpipe.train.loop.train``, ``recpipe.train.checkpoint.latest_checkpoint``).
"""
