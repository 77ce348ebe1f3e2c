"""Multi-layer perceptron blocks: ``Linear → [BatchNorm] → activation → [Dropout]`` per hidden layer."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from recpipe.config.sections import MlpConfig

ACTIVATIONS = ("relu", "gelu", "silu", "sigmoid", "dice")


@dataclass(frozen=True)
class MlpSpec:
    """The shape of an MLP, without its input width (the builder knows that).

    Args:
        hidden_units (tuple[int, ...]): output width of every layer, in order.
        activation (str): one of ``relu``, ``gelu``, ``silu``, ``sigmoid``, ``dice``.
        batch_norm (bool): BatchNorm between each Linear and its activation.
        dropout (float): dropout probability after each activation.

    Example::

        MlpSpec((512, 256, 128))  # the MultiTowerDIN deep tower
    """

    hidden_units: tuple[int, ...]
    activation: str = "relu"
    batch_norm: bool = False
    dropout: float = 0.0


def mlp_spec(cfg: MlpConfig) -> MlpSpec:
    """The :class:`MlpSpec` of a config's MLP (``hidden_units``, ``activation``, ``batch_norm``, ``dropout``)."""
    return MlpSpec(tuple(cfg.hidden_units), cfg.activation, cfg.batch_norm, cfg.dropout)


def optional_mlp_spec(cfg: MlpConfig | None) -> MlpSpec | None:
    """:func:`mlp_spec` of an optional MLP (``None`` stays ``None``: the part is left out)."""
    return None if cfg is None else mlp_spec(cfg)


class Dice(nn.Module):
    """DIN's data-adaptive activation: ``p·x + (1−p)·α·x`` with ``p = sigmoid(BN(x))``.

    Statistics are taken over every leading dimension, so ``(N, C)`` and ``(B, L, C)`` inputs both work.

    Args:
        num_features (int): channel count ``C`` (the last dimension).
        eps (float): BatchNorm epsilon.

    Example::

        Dice(64)(torch.randn(8, 64)).shape  # (8, 64)
    """

    def __init__(self, num_features: int, eps: float = 1e-9, device: torch.device | None = None) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(num_features, eps=eps, affine=False, device=device)
        self.alpha = nn.Parameter(torch.zeros(num_features, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = torch.sigmoid(self.norm(x.reshape(-1, x.shape[-1])).reshape(x.shape))
        return p * x + (1.0 - p) * self.alpha * x


def make_activation(
    name: str, num_features: int, device: torch.device | None = None, inplace: bool = False
) -> nn.Module:
    """The activation module called ``name`` (``dice`` needs the channel count; ``inplace`` applies to relu)."""
    if name == "relu":
        return nn.ReLU(inplace=inplace)
    if name == "gelu":
        return nn.GELU()
    if name == "silu":
        return nn.SiLU()
    if name == "sigmoid":
        return nn.Sigmoid()
    if name == "dice":
        return Dice(num_features, device=device)
    raise ValueError(f"unknown activation {name!r}; allowed: {list(ACTIVATIONS)}")


class MlpLayer(nn.Module):
    """One hidden layer: ``Linear → [BatchNorm] → activation → [Dropout]``.

    ``post`` applies everything after the Linear, so a caller may compute the Linear itself (the
    split first layer of DIN attention does); it may overwrite its argument (in-place ReLU).

    Args:
        in_features (int): input width.
        out_features (int): output width.
        activation (str): activation name, see :data:`ACTIVATIONS`.
        batch_norm (bool): add BatchNorm over all leading dimensions.
        dropout (float): dropout probability.
        device (torch.device | None): parameter device.
        bias (bool): the Linear has a bias (MIND's concat MLP may go without, as TorchEasyRec's ``bias: false``).

    Example::

        MlpLayer(192, 256)(torch.randn(8, 192)).shape  # (8, 256)
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        activation: str = "relu",
        batch_norm: bool = False,
        dropout: float = 0.0,
        device: torch.device | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=bias, device=device)
        self.norm = nn.BatchNorm1d(out_features, device=device) if batch_norm else None
        # In place: its input is always a fresh Linear/BatchNorm output that nothing else reads, and
        # ReLU's backward needs only its output. Saves one (N, out_features) buffer per layer.
        self.act = make_activation(activation, out_features, device=device, inplace=True)
        self.dropout = nn.Dropout(dropout) if dropout > 0.0 else None

    def post(self, h: torch.Tensor) -> torch.Tensor:
        if self.norm is not None:
            h = self.norm(h.reshape(-1, h.shape[-1])).reshape(h.shape)
        h = self.act(h)
        if self.dropout is not None:
            h = self.dropout(h)
        return h

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post(self.linear(x))


class MLP(nn.Module):
    """A stack of :class:`MlpLayer`; acts on the last dimension of any ``(..., in_features)`` input.

    Args:
        in_features (int): input width.
        hidden_units (list[int]): output width of every layer; the last one is ``out_features``.
        activation (str): activation after every layer (``relu``, ``gelu``, ``silu``, ``sigmoid``, ``dice``).
        batch_norm (bool): BatchNorm between each Linear and its activation.
        dropout (float): dropout probability after each activation.
        device (torch.device | None): parameter device (``meta`` allowed).
        bias (bool): every Linear has a bias.

    Example::

        mlp = MLP(272, [512, 256, 128])
        mlp(torch.randn(4, 272)).shape  # (4, 128); mlp.out_features == 128
    """

    def __init__(
        self,
        in_features: int,
        hidden_units: list[int] | tuple[int, ...],
        activation: str = "relu",
        batch_norm: bool = False,
        dropout: float = 0.0,
        device: torch.device | None = None,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if in_features < 1:
            raise ValueError(f"MLP in_features must be >= 1, got {in_features}")
        if not hidden_units or any(h < 1 for h in hidden_units):
            raise ValueError(
                f"MLP hidden_units must be a non-empty list of positive widths, got {hidden_units}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MLP dropout must be in [0, 1), got {dropout}")
        widths = [in_features, *hidden_units]
        self.in_features = in_features
        self.layers = nn.ModuleList(
            MlpLayer(a, b, activation, batch_norm, dropout, device=device, bias=bias)
            for a, b in zip(widths, widths[1:])
        )

    @classmethod
    def from_spec(cls, in_features: int, spec: MlpSpec, device: torch.device | None = None) -> MLP:
        return cls(
            in_features, list(spec.hidden_units), spec.activation, spec.batch_norm, spec.dropout, device
        )

    @property
    def out_features(self) -> int:
        return self.layers[-1].linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
