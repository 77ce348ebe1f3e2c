"""DLRM (Naumov et al. 2019): bottom MLP for dense features, pooled embeddings for categorical ones,
pairwise dot interaction, top MLP. The dense arch lives in :mod:`recpipe.models.dlrm.dense` (plain torch)."""

from __future__ import annotations

import torch

from recpipe.features.spec import FeatureSpec, TableSpec
from recpipe.models.base import SplitModel
from recpipe.models.blocks.embedding import EmbeddingGroup, EmbeddingInit
from recpipe.models.blocks.mlp import MlpSpec, mlp_spec
from recpipe.models.dlrm.config import DlrmConfig
from recpipe.models.dlrm.dense import DlrmDense, over_arch_width


class DLRM(SplitModel):
    """DLRM: dense arch, sparse arch, dot interaction, over arch → one logit per row.

    With ``arch_with_sparse`` (TorchEasyRec's option of the same name) the over arch also takes every
    raw embedding, so a categorical value's own effect on the logit is linear in its embedding instead
    of only reaching the over arch through its dot product with the dense vector.

    Args:
        tables (list[TableSpec]): embedding tables (``FeatureSpec.tables()``).
        sparse_keys (list[str]): categorical KJT keys, one pooled embedding each (all of one dim ``D``).
        dense_in_features (int): width of ``Batch.dense``.
        dense_arch (MlpSpec): bottom MLP; its last width must be ``D``.
        over_arch (MlpSpec): top MLP; a Linear to one logit follows.
        pooling (dict[str, str] | None): ``"sum"``/``"mean"`` per sparse key.
        embedding_init (EmbeddingInit): table initialization.
        over_in_features (int | None): expected over-arch input width, if a caller states it (checked
            against the derived ``D + F·(F+1)/2``, plus ``F·D`` with ``arch_with_sparse``).
        arch_with_sparse (bool): also feed the ``F`` raw embeddings to the over arch.
        device (torch.device | None): ``cpu`` (default), ``cuda`` or ``meta``.

    Example::

        # B = 2, F = 26 categorical keys C1..C26 (one id each), 13 dense floats
        model = DLRM(spec.tables(), [f"C{i}" for i in range(1, 27)], 13,
                     dense_arch=MlpSpec((64, 16)), over_arch=MlpSpec((128, 64)))
        logits = model(torch.randn(2, 13), kjt)          # (2,)
        emb = model.sparse_arch(kjt)                      # {"C1": (2, 16), ..., "C26": (2, 16)}
        model.dense_arch(torch.randn(2, 13), emb)         # (2,), same as forward
    """

    def __init__(
        self,
        tables: list[TableSpec],
        sparse_keys: list[str],
        dense_in_features: int,
        dense_arch: MlpSpec,
        over_arch: MlpSpec,
        pooling: dict[str, str] | None = None,
        embedding_init: EmbeddingInit = EmbeddingInit(),
        over_in_features: int | None = None,
        arch_with_sparse: bool = False,
        device: torch.device | None = None,
    ) -> None:
        if not sparse_keys:
            raise ValueError("DLRM needs at least one sparse feature")
        if dense_in_features < 1:
            raise ValueError(
                f"DLRM needs dense features for its bottom MLP, got dense_in_features={dense_in_features}"
            )
        embeddings = EmbeddingGroup(tables, sparse_keys, [], pooling, device=device, init=embedding_init)
        dims = {k: embeddings.embedding_dim(k) for k in sparse_keys}
        if len(set(dims.values())) != 1:
            raise ValueError(
                f"DLRM dot interaction needs one embedding dim for all sparse features, got {dims}"
            )
        dim = next(iter(dims.values()))
        bottom_out = dense_arch.hidden_units[-1]
        if bottom_out != dim:
            raise ValueError(
                f"DLRM dense arch output width {bottom_out} must equal the embedding dim {dim}: the dense "
                "vector is dotted with every embedding"
            )
        width = over_arch_width(len(sparse_keys), dim, arch_with_sparse)
        if over_in_features is not None and over_in_features != width:
            raw = " + F·D raw embeddings" if arch_with_sparse else ""
            raise ValueError(
                f"DLRM over arch input width {over_in_features} does not match the interaction output width "
                f"{width} (= embedding dim {dim} + F·(F+1)/2{raw} with F = {len(sparse_keys)} sparse features)"
            )
        dense = DlrmDense(
            sparse_keys, dense_in_features, dense_arch, over_arch, dim, arch_with_sparse, device
        )
        super().__init__(embeddings, dense, dense_in_features)
        self.sparse_keys = list(sparse_keys)
        self.embedding_dim = dim
        self.arch_with_sparse = arch_with_sparse


def build(spec: FeatureSpec, cfg: DlrmConfig, device: torch.device | None = None) -> DLRM:
    """DLRM over ``cfg.sparse_group``'s keys and all of ``Batch.dense``.

    Raises:
        ValueError: the sparse group lists dense features (or :class:`DLRM` rejects the shapes).
    """
    group = spec.group(cfg.sparse_group)
    if group.dense:
        raise ValueError(f"DLRM sparse group {group.name!r} lists dense features {group.dense}")
    return DLRM(
        spec.tables(),
        list(group.sparse),
        spec.dense_dim,
        dense_arch=mlp_spec(cfg.dense_mlp),
        over_arch=mlp_spec(cfg.over_mlp),
        pooling=spec.pooling(),
        embedding_init=EmbeddingInit(cfg.embedding_init, cfg.embedding_init_scale),
        arch_with_sparse=cfg.arch_with_sparse,
        device=device,
    )
