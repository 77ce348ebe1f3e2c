"""A float per history item carried in the KeyedJaggedTensor (whose values are int64) as its float64 bits:
FG writes ``x.view(np.int64)``; :func:`item_floats` reads them back as one ``(T, 1)`` float32 column beside the
items' embeddings. Plain torch arithmetic (no dtype view, which TorchScript cannot call), exact for every finite
float64, so the model, the table lookup of every export backend and a scripted module read one value.

Example::

    bits = torch.from_numpy(np.array([12.5, 0.0]).view(np.int64))
    item_floats(bits)    # tensor([[12.5], [0.0]])
"""

from __future__ import annotations

import torch


def floats_of_bits(bits: torch.Tensor) -> torch.Tensor:
    """int64 float64 bit patterns ``(T,)`` → their float64 values (finite numbers; FG refuses NaN and inf)."""
    # (TorchScript reads no module constants: the 52-bit mantissa mask and 2 ** 52 are written out)
    exponent = torch.bitwise_and(torch.bitwise_right_shift(bits, 52), 0x7FF)
    mantissa = torch.bitwise_and(bits, 0xFFFFFFFFFFFFF).to(torch.float64)
    normal = exponent > 0
    power = torch.where(normal, exponent - 1075, torch.full_like(exponent, -1074)).to(torch.float64)
    magnitude = torch.where(normal, mantissa + 4503599627370496.0, mantissa) * torch.pow(2.0, power)
    return torch.where(bits < 0, -magnitude, magnitude)


def item_floats(bits: torch.Tensor) -> torch.Tensor:
    """A float-per-item key's KJT values (float64 bits) → ``(T, 1)`` float32."""
    return floats_of_bits(bits.to(torch.int64)).to(torch.float32).unsqueeze(1)
