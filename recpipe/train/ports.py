"""A free local TCP port: for a 1-process group (:mod:`recpipe.train.dist`) and for torchrun's rendezvous
(:mod:`recpipe.launch.local`). Here, below both, so the trainer never imports its launcher."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it).

    Args:
        host (str): the address to bind.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
