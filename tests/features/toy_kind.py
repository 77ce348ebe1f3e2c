"""A toy feature kind declared the way a package outside recpipe declares one: this one module (its config
class ``Config`` and its ``KIND``) plus one entry-point line of group ``recpipe.feature_kinds``
(``text_length = tests.features.toy_kind``).

``text_length``: the length in characters of a text column, capped, as the id of a pooled KJT key with a
table of its own. A null (or empty) text has no id.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import Field

from recpipe.config.features import FeatureSection
from recpipe.features.columns import present_mask
from recpipe.features.kinds.base import ANY, ColumnKind, FeatureKind, SparseOut, SpecParts
from recpipe.features.spec import IdMapping, SparseFeature


class Config(FeatureSection):
    """``{kind: text_length, name: ..., column: ..., max_length: 16, embedding_dim: 4}``."""

    kind: Literal["text_length"]
    max_length: int = Field(16, ge=1)
    embedding_dim: int = Field(4, ge=1)

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [self.source_column]


def build(f: Config, parts: SpecParts) -> None:
    parts.sparse.append(
        SparseFeature(
            name=f.name,
            column=f.source_column,
            mapping=IdMapping("identity", f.max_length + 1),
            table=f.name,
            embedding_dim=f.embedding_dim,
            kind="text_length",
        )
    )


def lengths(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    arr = batch.column(f.column)
    if not pa.types.is_string(arr.type):
        arr = pc.cast(arr, pa.string())
    present = present_mask(arr)
    n = np.asarray(pc.fill_null(pc.utf8_length(arr), 0).to_numpy(zero_copy_only=False), np.int64)
    ids = np.minimum(n, f.mapping.size - 1)[present]
    return ids, present.astype(np.int32), None


def column(f: SparseFeature) -> tuple[ColumnKind, str]:
    return "text", ANY


KIND = FeatureKind(name="text_length", build=build, column=column, sparse=lengths)
