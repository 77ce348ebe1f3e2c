"""TorchEasyRec's ``tokenize_feature`` → recpipe kind ``tokenize`` (docs/source/feature/feature.md
TokenizeFeature; tzrec/features/tokenize_feature.py; field names and defaults from tzrec/protos/feature.proto).

``vocab_file`` and ``text_normalizer.stop_char_file`` are joined to ``asset_dir`` as TorchEasyRec joins them;
``default_value`` ``""`` is none. ``tokens_as_sequence`` with ``sequence_length`` maps to recpipe's (the tokens a
jagged history, :mod:`recpipe.features.kinds.tokenize`; a SEQUENCE group reads it). What recpipe does not honour
is reported at its line: ``tokens_as_sequence`` without ``sequence_length`` or of FG_NONE input, and the
normalizer options recpipe cannot reproduce
(:func:`recpipe.config.tokenize.norm_refusal`: TEXT_CHT2CHS, TEXT_FILTER's built-in stop list,
``max_length``), TorchEasyRec's defaults included when ``norm_options`` is empty.

Example::

    tokenize_feature { feature_name: "title_token" expression: "item:title" vocab_file: "tokenizer.json"
                       embedding_dim: 8 text_normalizer { norm_options: [TEXT_UPPER2LOWER] } }
    # → {kind: tokenize, name: title_token, column: title, vocab_file: tokenizer.json, embedding_dim: 8,
    #    text_normalizer: {norm_options: [TEXT_UPPER2LOWER]}}
"""

from __future__ import annotations

import os
from typing import Any

from recpipe.config.features import feature_output
from recpipe.config.tokenize import DEFAULT_NORM_OPTIONS, TOKENIZER_TYPES, norm_refusal
from recpipe.tzrec.problems import Findings


def map_tokenize(
    cfg: Any, path: str, found: Findings, column: str | None, encoded: bool, multival_sep: str
) -> dict[str, Any]:
    """The recpipe feature of one ``tokenize_feature`` block; ``column`` is its expression's column (None: the
    feature's name); ``encoded`` (FG_NONE): the column holds the token ids FG wrote, joined by ``multival_sep``."""
    out: dict[str, Any] = {"kind": "tokenize", "name": cfg.feature_name}
    if column and feature_output(column) is not None:
        found.problem(
            f"{path}.expression",
            f"input {column!r}: tokenize_feature reads a text column here; recpipe derives 'feature:X' of a raw "
            "feature only, a number",
        )
    elif column and not encoded:
        out["column"] = column
    asset = cfg.asset_dir if cfg.HasField("asset_dir") else ""
    out["vocab_file"] = os.path.join(asset, cfg.vocab_file) if asset else cfg.vocab_file
    if cfg.tokenizer_type not in TOKENIZER_TYPES:
        found.problem(
            f"{path}.tokenizer_type",
            f"tokenizer_type {cfg.tokenizer_type!r} is not one of {list(TOKENIZER_TYPES)} (TorchEasyRec's)",
        )
    elif cfg.tokenizer_type != "bpe":
        out["tokenizer_type"] = cfg.tokenizer_type
    out["embedding_dim"] = cfg.embedding_dim
    if cfg.pooling != "sum" and not cfg.tokens_as_sequence:
        out["pooling"] = cfg.pooling
    if cfg.default_value:
        out["default_value"] = cfg.default_value
    if encoded:
        out["separator"] = multival_sep
    if cfg.tokens_as_sequence and encoded:
        found.problem(
            f"{path}.tokens_as_sequence",
            "tokens_as_sequence of pre-encoded input (FG_NONE: the token ids FG wrote) is not supported yet: "
            "recpipe reads them as one pooled key only",
        )
    elif cfg.tokens_as_sequence and not cfg.HasField("sequence_length"):
        found.problem(
            f"{path}.sequence_length",
            "tokens_as_sequence needs sequence_length (feature.md: the most tokens kept; the proto has no default)",
        )
    elif cfg.tokens_as_sequence:
        out["tokens_as_sequence"] = True
        out["sequence_length"] = cfg.sequence_length
    elif cfg.HasField("sequence_length"):
        found.note(f"{path}.sequence_length", "ignored: the feature is not a sequence (tokens_as_sequence)")
    if cfg.HasField("text_normalizer"):
        norm = _normalizer(cfg.text_normalizer, asset, f"{path}.text_normalizer", found)
        if norm is not None and not encoded:
            out["text_normalizer"] = norm
        elif norm is not None:
            found.note(f"{path}.text_normalizer", "ignored: pre-encoded (FG_NONE) input is tokenized already")
    return out


def _normalizer(n: Any, asset: str, path: str, found: Findings) -> dict[str, Any] | None:
    """``text_normalizer {}`` → recpipe's, or None with the reason reported at its field."""
    descriptor = n.DESCRIPTOR.fields_by_name["norm_options"].enum_type
    options = [descriptor.values_by_number[v].name for v in n.norm_options]
    stop = n.stop_char_file if n.HasField("stop_char_file") else None
    if stop is not None and asset:
        stop = os.path.join(asset, stop)
    max_length = n.max_length if n.HasField("max_length") else None
    why = norm_refusal(options or list(DEFAULT_NORM_OPTIONS), stop, max_length)
    if why is not None:
        field = "max_length" if max_length is not None and "max_length" in why else "norm_options"
        default = "" if options else " (no norm_options: TorchEasyRec's defaults)"
        found.problem(f"{path}.{field}", f"{why}{default}")
        return None
    out: dict[str, Any] = {"norm_options": options} if options else {}
    if stop is not None:
        out["stop_char_file"] = stop
    return out
