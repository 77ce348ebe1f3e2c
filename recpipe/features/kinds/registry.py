"""The :class:`~recpipe.features.kinds.base.FeatureKind` of a kind name: its catalogue line
(:data:`recpipe.config.catalogue.FEATURE_KINDS`) or an entry point of group ``recpipe.feature_kinds``."""

from __future__ import annotations

from functools import cache

from recpipe.config.root import feature_kind_entry, resolve
from recpipe.features.kinds.base import FeatureKind


@cache
def feature_kind(name: str) -> FeatureKind:
    """The kind called ``name``.

    Raises:
        ValueError: an unknown kind, or a declaration whose ``fg`` is not a FeatureKind of that name.
    """
    entry = feature_kind_entry(name)
    kind = resolve(entry.fg)
    if not isinstance(kind, FeatureKind) or kind.name != name:
        raise ValueError(f"feature kind {name!r}: {entry.fg} is not a FeatureKind named {name!r}")
    return kind
