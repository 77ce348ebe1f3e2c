"""``data.negative_sampler``: the item table a retrieval model draws its sampled negatives from (TorchEasyRec's
``data_config.negative_sampler``, tzrec/protos/sampler.proto ``NegativeSampler``), read by
:func:`recpipe.data.negative_sampler.load_item_table`. Stdlib and pydantic only."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator

from recpipe.config.sections import Strict

# graph-learn's item table columns (TorchEasyRec's "id:int64 | weight:float | attrs:string").
GL_ID_COLUMN = "id"
GL_ATTRS_COLUMN = "attrs"


class NegativeSamplerConfig(Strict):
    """Where the catalogue is and how many negatives each training batch draws from it.

    Args:
        input_path (str): the item table: a Parquet/CSV file or folder, an ``odps://`` table (``{NAME}``
            placeholders as in ``data.train``) or a ``synthetic:`` URI.
        item_id_field (str): the training rows' item id column (the batch's positives, excluded from the draws).
        num_sample (int): negatives per training batch, shared by its rows (TorchEasyRec's ``num_sample``).
        attr_fields (list[str]): the item columns the item tower reads, in order (TorchEasyRec's
            ``attr_fields``); each a column of the training rows too.
        weight_field (str): the column of each item's sampling weight (draws ∝ weight).
        attr_delimiter (str | None): None: the table has ``item_id_field`` and every attribute as columns;
            set: graph-learn's format (TorchEasyRec's), columns ``id``, ``weight_field`` and ``attrs``, the
            attributes of ``attr_fields`` joined in that order by this delimiter.

    Example::

        data:
          negative_sampler:
            input_path: "odps://{PROJECT}/tables/taobao_ad_feature_gl_v1"
            item_id_field: adgroup_id
            num_sample: 1024
            attr_fields: [adgroup_id, cate_id, campaign_id, customer, brand, price]
            attr_delimiter: "\\x02"       # rows like  id=41, weight=3.0, attrs="41\\x027\\x02…"
    """

    input_path: str = Field(min_length=1)
    item_id_field: str = Field(min_length=1)
    num_sample: int = Field(ge=1)
    attr_fields: list[str] = Field(min_length=1)
    weight_field: str = Field("weight", min_length=1)
    attr_delimiter: str | None = Field(None, min_length=1)

    @field_validator("attr_fields")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        dup = sorted({a for a in v if v.count(a) > 1})
        if dup:
            raise ValueError(f"attr_fields lists {dup} more than once")
        return v

    @model_validator(mode="after")
    def _columns(self) -> NegativeSamplerConfig:
        if self.weight_field in self.attr_fields:
            raise ValueError(f"weight_field {self.weight_field!r} is also in attr_fields {self.attr_fields}")
        if self.attr_delimiter is not None:
            clash = [c for c in (GL_ID_COLUMN, GL_ATTRS_COLUMN) if c == self.weight_field]
            if clash:
                raise ValueError(
                    f"weight_field {self.weight_field!r}: with attr_delimiter the table's columns are "
                    f"{GL_ID_COLUMN!r}, the weight and {GL_ATTRS_COLUMN!r}"
                )
        return self
