"""The config of kind ``tokenize`` (TorchEasyRec's ``tokenize_feature``, docs/source/feature/feature.md
TokenizeFeature; tzrec/protos/feature.proto ``TokenizeFeature`` / ``TextNormalizer``): a text column → its token
ids, one pooled key whose table has one row per token of the vocabulary.

``text_normalizer`` options are TorchEasyRec's names. recpipe applies the ones whose meaning it reproduces
(case, full-width → half-width, Chinese characters split by spaces, spaces removed, stop characters removed
with a given ``stop_char_file``) and refuses the others at config load, naming the feature and why: a block
without ``norm_options`` means TorchEasyRec's defaults, which include ``TEXT_CHT2CHS``.

Example::

    {kind: tokenize, name: title_token, column: title, vocab_file: tokenizer.json, embedding_dim: 8,
     text_normalizer: {norm_options: [TEXT_UPPER2LOWER, TEXT_SBC2DBC]}}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from recpipe.config.features import MULTI_VALUE_SEPARATOR, FeatureSection, _TableMixin, feature_output
from recpipe.config.sections import Strict

NORM_OPTIONS = (
    "TEXT_LOWER2UPPER",
    "TEXT_UPPER2LOWER",
    "TEXT_SBC2DBC",
    "TEXT_CHT2CHS",
    "TEXT_FILTER",
    "TEXT_SPLITCHRS",
    "TEXT_REMOVE_SPACE",
)
# feature.proto TextNormalizer: "default is TEXT_LOWER2UPPER & TEXT_SBC2DBC & TEXT_CHT2CHS & TEXT_FILTER".
DEFAULT_NORM_OPTIONS = ("TEXT_LOWER2UPPER", "TEXT_SBC2DBC", "TEXT_CHT2CHS", "TEXT_FILTER")
# The order recpipe applies them in, whatever order the config lists them in (recpipe.features.text_norm).
NORM_ORDER = (
    "TEXT_SBC2DBC",
    "TEXT_LOWER2UPPER",
    "TEXT_UPPER2LOWER",
    "TEXT_FILTER",
    "TEXT_SPLITCHRS",
    "TEXT_REMOVE_SPACE",
)
TOKENIZER_TYPES = ("bpe", "sentencepiece")


def norm_refusal(options: list[str], stop_char_file: str | None, max_length: int | None) -> str | None:
    """Why recpipe cannot normalize text as a TorchEasyRec ``text_normalizer`` of these settings would, or None.

    Args:
        options (list[str]): the ``norm_options`` in effect (TorchEasyRec's defaults where none are listed).
        stop_char_file (str | None): TEXT_FILTER's list of characters; None: TorchEasyRec's built-in one.
        max_length (int | None): TorchEasyRec's "longer texts are not normalized".
    """
    if "TEXT_CHT2CHS" in options:
        return (
            "TEXT_CHT2CHS (traditional → simplified Chinese) needs TorchEasyRec's conversion table, which is part "
            "of its FG library and not published as data; recpipe cannot reproduce it offline"
        )
    if "TEXT_FILTER" in options and stop_char_file is None:
        return (
            "TEXT_FILTER without stop_char_file uses TorchEasyRec's built-in stop list, a download "
            "(tzrec.oss-accelerate.aliyuncs.com/third_party/stop_char); give stop_char_file"
        )
    if {"TEXT_LOWER2UPPER", "TEXT_UPPER2LOWER"} <= set(options):
        return "TEXT_LOWER2UPPER and TEXT_UPPER2LOWER contradict each other; give one"
    if max_length is not None:
        return (
            "max_length (texts longer are not normalized): TorchEasyRec does not say whether it counts bytes or "
            "characters, so recpipe cannot reproduce which texts it skips"
        )
    if stop_char_file is not None and "TEXT_FILTER" not in options:
        return "stop_char_file is TEXT_FILTER's; norm_options do not include TEXT_FILTER"
    return None


class TextNormalizerConfig(Strict):
    """TorchEasyRec's ``text_normalizer {}``: ``norm_options`` (None: TorchEasyRec's defaults,
    :data:`DEFAULT_NORM_OPTIONS`), ``stop_char_file`` (TEXT_FILTER's characters: every character of every line),
    ``max_length`` (read to be refused)."""

    norm_options: list[Literal[NORM_OPTIONS]] | None = None  # type: ignore[valid-type]
    stop_char_file: str | None = None
    max_length: int | None = Field(None, ge=0)

    def options(self) -> list[str]:
        """The options in effect (each once, in :data:`NORM_OPTIONS` order; applied in :data:`NORM_ORDER`)."""
        given = DEFAULT_NORM_OPTIONS if self.norm_options is None else self.norm_options
        return [o for o in NORM_OPTIONS if o in given]


class TokenizeFeatureConfig(_TableMixin, FeatureSection):
    """Kind ``tokenize`` (TorchEasyRec's ``tokenize_feature``): the token ids of a text column (default: the
    name) by the tokenizer ``vocab_file``: a HuggingFace ``tokenizer.json`` (``tokenizer_type: bpe``, any model
    the ``tokenizers`` library reads) or a SentencePiece model (``sentencepiece``). The table has one row per
    token (the tokenizer's vocabulary size, added tokens included); ``default_value`` is the text a missing
    row is tokenized as (None or TorchEasyRec's ``""``: none, the row has no token). With ``data.fg_encoded`` the
    column holds the token ids FG wrote, joined by ``separator`` (or a list column).

    ``tokens_as_sequence`` (TorchEasyRec's, feature.md TokenizeFeature): the tokens are a history instead of
    one pooled key, one token an item, the first ``sequence_length`` (required then) kept, for a sequence
    group; a missing row is tokenized as ``default_value``, ``"0"`` when none (TorchEasyRec's ``fg_json``)."""

    kind: Literal["tokenize"]
    vocab_file: str
    tokenizer_type: Literal[TOKENIZER_TYPES] = "bpe"  # type: ignore[valid-type]
    text_normalizer: TextNormalizerConfig | None = None
    embedding_dim: int = Field(16, ge=1)
    embedding_name: str | None = None
    pooling: Literal["sum", "mean"] = "sum"
    default_value: str | None = None
    separator: str = Field(MULTI_VALUE_SEPARATOR, min_length=1)
    tokens_as_sequence: bool = False
    sequence_length: int | None = Field(None, ge=1)

    def text_columns(self, skip_bad_rows: bool) -> list[str]:
        return [self.source_column]

    @model_validator(mode="after")
    def _normalizer(self) -> TokenizeFeatureConfig:
        if feature_output(self.source_column) is not None:
            raise ValueError(
                f"feature {self.name!r}: input {self.source_column!r}: kind tokenize reads a text column; the "
                "feature outputs recpipe derives ('feature:X' of a raw feature) are numbers"
            )
        if self.tokens_as_sequence and self.sequence_length is None:
            raise ValueError(
                f"feature {self.name!r}: tokens_as_sequence needs sequence_length (the most tokens of a row kept, "
                "as TorchEasyRec's feature.md asks)"
            )
        if self.sequence_length is not None and not self.tokens_as_sequence:
            raise ValueError(
                f"feature {self.name!r}: sequence_length is a setting of tokens_as_sequence (the tokens as a "
                "history); this feature's tokens are one pooled key"
            )
        norm = self.text_normalizer
        if norm is not None:
            why = norm_refusal(norm.options(), norm.stop_char_file, norm.max_length)
            if why is not None:
                raise ValueError(f"feature {self.name!r}: text_normalizer: {why}")
        return self
