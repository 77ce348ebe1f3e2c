"""The :class:`~recpipe.features.kinds.base.FeatureKind` of a kind name: its catalogue line
(:data:`recpipe.config.catalogue.FEATURE_KINDS`) or an entry point of group ``recpipe.feature_kinds``."""

from __future__ import annotations

from functools import cache

from recpipe.config.root import declared, resolve
from recpipe.features.kinds.base import FeatureKind


@cache
def feature_kind(name: str) -> FeatureKind:
    """The kind called ``name``.

    Raises:
        ValueError: an unknown kind, or a declaration whose ``fg`` is not a FeatureKind of that name.
    """
    entry = declared("FEATURE_KINDS", name)
    kind = resolve(entry.code)
    if not isinstance(kind, FeatureKind) or kind.name != name:
        raise ValueError(f"feature kind {name!r}: {entry.code} is not a FeatureKind named {name!r}")
    return kind
