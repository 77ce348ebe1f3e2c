"""One thin KFP component per recpipe stage: a typed signature, a docstring, one call into ``recpipe.stages``.

Kubernetes settings (GPUs, secrets, node selectors) are attached in ``pipelines/``, never here.
"""

from components.evaluate import evaluate
from components.export import export
from components.image import CUDA_IMAGE, IMAGE
from components.ingest import fit, ingest
from components.register import promote, register
from components.run import finish, reject, start
from components.train import train

__all__ = [
    "CUDA_IMAGE",
    "IMAGE",
    "evaluate",
    "export",
    "finish",
    "fit",
    "ingest",
    "promote",
    "register",
    "reject",
    "start",
    "train",
]
