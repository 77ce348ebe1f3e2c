"""The container images every component runs in, tied to the package version (never ``:latest``)."""

import recpipe

IMAGE = f"ghcr.io/recpipe/recpipe:{recpipe.__version__}"
"""CPU image: recpipe with its exact dependency pins (``images/Dockerfile``)."""

CUDA_IMAGE = f"ghcr.io/recpipe/recpipe-cuda:{recpipe.__version__}"
"""CUDA image for training (single-pod GPU training and the PyTorchJob workers)."""
