"""All-reduce across every process of a PyTorchJob: proves the training operator's rendezvous (torchrun reads
its PET_* variables), the network between the job's pods and the collective backend (NCCL on GPUs, gloo on
CPUs). Exit 0 when every rank holds the expected sum."""

import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    backend = os.environ.get("RECPIPE_CHECK_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        if not torch.cuda.is_available():
            print("RECPIPE_CHECK_BACKEND=nccl but no GPU is visible", flush=True)
            return 1
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    values = torch.full((1 << 20,), float(rank + 1), device=device)
    dist.all_reduce(values)
    expected = world * (world + 1) / 2
    ok = bool(torch.all(values == expected))
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(
        f"rank {rank}/{world} {backend} on {where}: all_reduce sum {values[0].item():.0f}, "
        f"expected {expected:.0f}: {'ok' if ok else 'MISMATCH'}",
        flush=True,
    )
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
