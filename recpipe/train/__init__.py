"""Training: one trainer for 1..N processes (DistributedModelParallel, fused sparse optimizer,
TrainPipelineSparseDist), DCP checkpoints, its result (``train_result.json``) and memory reports. The trainer
is handed its evaluation (:class:`recpipe.train.loop.Evaluate`; evaluation sits above it, in
:mod:`recpipe.eval`). How the processes are started, and the per-process entry that wires trainer and
evaluation together (:mod:`recpipe.launch.worker`), is :mod:`recpipe.launch`'s business.

This package imports nothing, so a light importer (the launcher, a pipeline step) does not load torchrec:
import from the modules (``recpipe.train.loop.train``, ``recpipe.train.checkpoint.latest_checkpoint``).
"""
