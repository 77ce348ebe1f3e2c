"""Kind ``tokenize`` (TorchEasyRec's ``tokenize_feature``): the token ids of a text column, one pooled key whose
table has a row per token of the tokenizer's vocabulary.

The tokenizer is ``vocab_file``: a HuggingFace ``tokenizer.json`` read by the ``tokenizers`` library
(``tokenizer_type: bpe``; TorchEasyRec reads it with tokenizers-cpp, the same Rust library) or a SentencePiece
model (``sentencepiece``). As TorchEasyRec's FG: no special tokens are added (tokenizers-cpp's ``Encode``), the
table has ``get_vocab_size(with_added_tokens=True)`` rows (SentencePiece: ``GetPieceSize``), and
``text_normalizer`` runs first (:mod:`recpipe.features.text_norm`, the options recpipe reproduces).

The file's bytes travel in the entry's ``params`` (base64, with their sha256), as an id feature's
``vocab_file`` travels as its vocabulary: ``fg.json`` alone rebuilds the tokenizer wherever it is read (a
checkpoint, every export folder, a cluster pod), and the spec's digest covers the tokenizer. ``stop_char_file``
travels as its characters.

``tokens_as_sequence``: the same tokens as a history (:class:`~recpipe.features.spec.SequenceFeature` of kind
``tokenize``, its one key named after the feature, jagged: one token an item), the first ``sequence_length``
kept, ``default_value`` ``"0"`` when none (TorchEasyRec's ``TokenizeFeature.fg_json``); a sequence group reads
it as any history key.

The raw-value contract: a missing row (null, ``""``, a column left out at serving) and a row whose normalized
text is empty are tokenized as ``default_value`` (not normalized: TorchEasyRec's default is the tokenizer's
input), or have no token when it is None; a value that is not text (a number, a list) is a bad row. Vectorized:
the normalizer runs over the column, the tokenizer's batch call over the batch's distinct present values
(``Tokenizer.encode_batch`` / ``SentencePieceProcessor.encode`` of a list: a title repeats across a log's rows
as its item does), their ids gathered into the rows without a loop of ours (:func:`encode_distinct`); a
tokenizer whose tokens never span a space (a WordPiece / BPE ``tokenizer.json`` after a whitespace
pre-tokenizer) gets each distinct word once, through a bounded word memo kept across batches
(:meth:`_Tokenizer.encode_flat`): the same ids, tested equal to the library's on every text.

Example::

    # a BPE tokenizer.json whose tokens include "abc", "Ġef", "ij"; default_value None
    KIND.sparse(spec.feature("title_token"), pa.record_batch({"title": ["abc efg", "", "hij"]}))
    # values: the ids of ["abc", "Ġef", "g", "h", "ij"], lengths [3, 0, 2]
"""

from __future__ import annotations

import base64
import hashlib
import json
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from recpipe.config.features import MULTI_VALUE_SEPARATOR
from recpipe.config.tokenize import TokenizeFeatureConfig
from recpipe.features.columns import BadRows, as_numpy, is_string
from recpipe.features.kinds.base import TEXT, ColumnKind, FeatureKind, HistoryOut, SparseOut, SpecParts
from recpipe.features.spec import FeatureSpecError, IdMapping, SequenceFeature, SparseFeature
from recpipe.features.text_norm import normalize_text, stop_chars_of

EXPECTED = "text to tokenize (a string value)"


class _Tokenizer:
    """One loaded tokenizer: ``encode(texts) -> list of id lists`` and its ``size`` (table rows)."""

    def __init__(self, kind: str, data: bytes, where: str) -> None:
        try:
            if kind == "bpe":
                from tokenizers import Tokenizer

                self._tok: Any = Tokenizer.from_str(data.decode("utf-8"))
                vocab = self._tok.get_vocab(with_added_tokens=True)
                self.size = int(self._tok.get_vocab_size(with_added_tokens=True))
                top = max(vocab.values(), default=-1)
            else:
                import sentencepiece

                self._tok = sentencepiece.SentencePieceProcessor(model_proto=data)
                self.size = top = int(self._tok.get_piece_size())
                top -= 1
        except ImportError as err:
            raise FeatureSpecError(
                f"{where}: tokenizer_type {kind!r} needs the {err.name!r} package (pip install {err.name})"
            ) from None
        except Exception as err:  # the libraries raise their own types for a malformed file
            raise FeatureSpecError(f"{where}: not a {kind} tokenizer file: {err}") from None
        if self.size < 1 or top >= self.size:
            raise FeatureSpecError(
                f"{where}: token ids reach {top} but the vocabulary has {self.size} tokens: the table's rows "
                "(the vocabulary size, as TorchEasyRec sizes it) would not hold every id"
            )
        self.kind = kind
        self.splits_at_spaces = kind == "bpe" and _splits_at_spaces(json.loads(data))
        self._memo: dict[str, list[int]] = {}

    def encode(self, texts: list[str]) -> list[list[int]]:
        if self.kind == "bpe":  # encode_batch_fast: the same ids, without the offsets FG never reads
            encode = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
            return list(map(attrgetter("ids"), encode(texts, add_special_tokens=False)))
        return self._tok.encode(texts, out_type=int)

    def encode_words(self, words: list[str]) -> list[list[int]]:
        """:meth:`encode` of distinct words through the tokenizer's word memo: a word's tokens are a pure
        function of the word, and the words of titles repeat across batches (and requests) as items do, so a
        word the memo holds is not tokenized again. The memo holds at most :data:`MEMO_WORDS` words and is
        emptied when a batch would overflow it: its size is bounded, and what it returns never changes."""
        memo = self._memo
        got = list(map(memo.get, words))  # read once: another thread may empty the memo meanwhile
        new = [w for w, ids in zip(words, got, strict=True) if ids is None]
        if not new:
            return got  # type: ignore[return-value]
        fresh = dict(zip(new, self.encode(new), strict=True))
        self._remember(fresh)
        return [fresh[w] if ids is None else ids for w, ids in zip(words, got, strict=True)]

    def encode_flat(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """The token ids of every text (a string array without nulls) back to back, and each text's count.

        A tokenizer whose tokens never span an ASCII space (:func:`_splits_at_spaces`) reads each text from its
        memo, and tokenizes a text the memo lacks as its space-separated words, each distinct word once through
        the same memo (:meth:`encode_words`): the tokens of a text are its words' tokens in order, so this equals
        tokenizing every text (a text of one word is that word: one key, one value)."""
        if not self.splits_at_spaces:
            return _flatten(self.encode(texts.to_pylist()))
        items = texts.to_pylist()
        got = list(map(self._memo.get, items))  # read once: another thread may empty the memo meanwhile
        todo = [i for i, ids in enumerate(got) if ids is None]
        if todo:
            values, per_text = self._encode_by_words(texts.take(pa.array(todo, pa.int64())))
            pieces = np.split(values, np.cumsum(per_text)[:-1]) if len(todo) > 1 else [values]
            fresh = {items[i]: ids.tolist() for i, ids in zip(todo, pieces, strict=True)}
            self._remember(fresh)
            got = [fresh[t] if ids is None else ids for t, ids in zip(items, got, strict=True)]
        return _flatten(got)  # type: ignore[arg-type]

    def _encode_by_words(self, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        words = pc.split_pattern(texts, " ")
        codes = pc.dictionary_encode(words.flatten())
        flat, per_word = _flatten(self.encode_words(codes.dictionary.to_pylist()))
        values, word_lengths = gather_runs(flat, per_word, as_numpy(codes.indices).astype(np.int64))
        ends = np.cumsum(word_lengths)
        bounds = as_numpy(words.offsets).astype(np.int64)  # each text's words: [bounds[i], bounds[i + 1])
        totals = np.concatenate([[0], ends])[bounds]
        return values, np.diff(totals)

    def _remember(self, fresh: dict[str, list[int]]) -> None:
        """Add ``fresh`` to the memo, emptied first when it would outgrow :data:`MEMO_WORDS` keys."""
        if len(self._memo) + len(fresh) > MEMO_WORDS:
            self._memo.clear()
        if len(fresh) <= MEMO_WORDS:
            self._memo.update(fresh)


# The most keys (texts and words) a tokenizer's memo holds (``_Tokenizer.encode_flat``): ~100 MB at the worst.
MEMO_WORDS = 1 << 20

# What a tokenizer.json may hold for its tokens never to span an ASCII space (``encode_flat``'s word split):
# pre-tokenizers that split at every whitespace (or only split further), normalizers that map one character
# at a time, and no truncation or padding (which count tokens over the whole text).
_SPACE_PRE_TOKENIZERS = {"Whitespace", "WhitespaceSplit", "BertPreTokenizer"}
_SPLIT_ONLY_PRE_TOKENIZERS = _SPACE_PRE_TOKENIZERS | {"Punctuation", "Digits"}
_CHARWISE_NORMALIZERS = {"Lowercase", "BertNormalizer", "NFD", "NFKD", "StripAccents"}


def _splits_at_spaces(config: dict[str, Any]) -> bool:
    """Whether a HuggingFace ``tokenizer.json`` tokenizes a text as its space-separated words one by one."""
    pre = config.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    types = {step.get("type") for step in steps}
    if not types & _SPACE_PRE_TOKENIZERS or not types <= _SPLIT_ONLY_PRE_TOKENIZERS:
        return False
    norm = config.get("normalizer")
    norms = [] if norm is None else norm.get("normalizers", []) if norm.get("type") == "Sequence" else [norm]
    if not {n.get("type") for n in norms} <= _CHARWISE_NORMALIZERS:
        return False
    if config.get("truncation") is not None or config.get("padding") is not None:
        return False
    # An added token is matched on the whole text before the split: one holding whitespace could span words.
    return not any(any(c.isspace() for c in t.get("content", "")) for t in config.get("added_tokens") or [])


def _flatten(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    per = np.fromiter(map(len, ids), np.int64, count=len(ids))
    return np.fromiter(chain.from_iterable(ids), np.int64, count=int(per.sum())), per


def gather_runs(flat: np.ndarray, per: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Run ``idx[k]`` of ``flat`` (runs of ``per`` values back to back) for every ``k``, back to back, and the
    runs' lengths: ``flat [1, 2, 3], per [2, 1], idx [1, 0, 1]`` → ``[3, 1, 2, 3]``, ``[1, 2, 1]``."""
    lengths = per[idx]
    if idx.size == per.size and np.array_equal(idx, np.arange(idx.size)):
        return flat, lengths
    starts = np.cumsum(per) - per
    row_of = np.repeat(np.arange(idx.size), lengths)
    within = np.arange(row_of.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return flat[starts[idx][row_of] + within], lengths


# (tokenizer_type, sha256) → the loaded tokenizer: one per process, however many specs carry it.
_LOADED: dict[tuple[str, str], _Tokenizer] = {}


def _loaded(kind: str, sha256: str, data: str, where: str) -> _Tokenizer:
    tok = _LOADED.get((kind, sha256))
    if tok is None:
        raw = base64.b64decode(data)
        if hashlib.sha256(raw).hexdigest() != sha256:
            raise FeatureSpecError(f"{where}: the tokenizer's bytes do not match their sha256 {sha256[:12]}…")
        tok = _LOADED[(kind, sha256)] = _Tokenizer(kind, raw, where)
    return tok


def clear_memos() -> None:
    """Empty every loaded tokenizer's word memo (a benchmark's cold start; results never depend on it)."""
    for tok in _LOADED.values():
        tok._memo.clear()


def tokenizer(f: SparseFeature) -> _Tokenizer:
    """The tokenizer an entry carries (loaded once per process)."""
    p = f.params
    return _loaded(p["tokenizer_type"], p["vocab_sha256"], p["vocab_data"], f"feature {f.name!r}")


def build(f: TokenizeFeatureConfig, parts: SpecParts) -> None:
    path = Path(f.vocab_file)
    if not path.is_file():
        raise FeatureSpecError(f"feature {f.name!r}: vocab_file {path} does not exist")
    raw = path.read_bytes()
    sha = hashlib.sha256(raw).hexdigest()
    params: dict[str, Any] = {
        "tokenizer_type": f.tokenizer_type,
        "vocab_file": str(f.vocab_file),
        "vocab_sha256": sha,
        "vocab_data": base64.b64encode(raw).decode("ascii"),
    }
    size = _loaded(f.tokenizer_type, sha, params["vocab_data"], f"feature {f.name!r}, vocab_file {path}").size
    if parts.encoded and f.tokens_as_sequence:
        raise FeatureSpecError(
            f"feature {f.name!r}: pre-encoded input (data.fg_encoded) of tokens_as_sequence is not supported yet: "
            "recpipe reads the token ids FG wrote as one pooled key only"
        )
    if parts.encoded:
        # TorchEasyRec's FG_NONE: the column holds the token ids FG wrote, read as an id feature's.
        sep = {"separator": f.separator} if f.separator != MULTI_VALUE_SEPARATOR else {}
        parts.add_table(f, f.source_column, IdMapping("identity", size), "id", pooling=f.pooling, params=sep)
        return
    norm = f.text_normalizer
    if norm is not None:
        params["norm_options"] = norm.options()
        if norm.stop_char_file is not None:
            stop = Path(norm.stop_char_file)
            if not stop.is_file():
                raise FeatureSpecError(f"feature {f.name!r}: stop_char_file {stop} does not exist")
            params["stop_chars"] = stop_chars_of(stop.read_text(encoding="utf-8"))
    params["default_value"] = f.default_value or None
    if not f.tokens_as_sequence:
        parts.add_table(
            f, f.source_column, IdMapping("identity", size), "tokenize", pooling=f.pooling, params=params
        )
        return
    # TorchEasyRec's fg_json of tokens_as_sequence: an empty default_value is "0" (tokenize_feature.py).
    params["default_value"] = f.default_value or "0"
    parts.add_table(
        f, f.source_column, IdMapping("identity", size), "tokenize", params=params, sequence=f.name
    )
    parts.sequences.append(
        SequenceFeature(
            name=f.name,
            column=f.source_column,
            max_length=f.sequence_length,
            # A text, not items joined (its tokens are the items): words by spaces, which the parity check's
            # edge rows join (0, 1 and sequence_length words: at least as many tokens); no sub-values.
            delimiter=" ",
            sub_delimiter=MULTI_VALUE_SEPARATOR,
            sub_features=[f.name],
            kind="tokenize",
        )
    )


def sparse(f: SparseFeature, batch: pa.RecordBatch) -> SparseOut:
    n = batch.num_rows
    arr = batch.column(f.column)
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    bad = None
    if pa.types.is_null(arr.type):
        arr = pa.nulls(n, pa.string())
    elif not is_string(arr.type):
        where = np.flatnonzero(~as_numpy(arr.is_null()))
        bad = BadRows(where, f.column, f"{EXPECTED} (feature {f.name!r})", arr) if where.size else None
        arr = pa.nulls(n, pa.string())
    options = f.params.get("norm_options")
    if options:
        arr = normalize_text(arr, options, f.params.get("stop_chars", ""))
    missing = as_numpy(pc.fill_null(pc.equal(arr, ""), True)).astype(bool)
    default = f.params.get("default_value")
    if default is not None and missing.any():
        arr = pc.if_else(pa.array(missing), pa.scalar(default, arr.type), arr)
        missing[:] = False
    if bad is not None:
        missing[bad.rows] = True  # a bad row has no token (skipped under on_bad_row: skip)
    present = np.flatnonzero(~missing)
    lengths = np.zeros(n, np.int32)
    if not present.size:
        return np.zeros(0, np.int64), lengths, bad
    values, lengths[present] = encode_distinct(tokenizer(f), arr.take(pa.array(present)))
    return values, lengths, bad


def encode_distinct(tok: _Tokenizer, texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The token ids of every text (no null among them) as ``(values, lengths)``: each distinct text tokenized
    once (:meth:`_Tokenizer.encode_flat`) and its ids gathered into every row that holds it (a title repeats in
    a batch as its item does; the tokenizer is a pure function of the text, so this equals tokenizing every
    row; nothing is kept after)."""
    codes = pc.dictionary_encode(texts)
    flat, per_text = tok.encode_flat(codes.dictionary)
    values, lengths = gather_runs(flat, per_text, as_numpy(codes.indices).astype(np.int64))
    return values, lengths.astype(np.int32)


def token_history(
    s: SequenceFeature, feats: list[SparseFeature], batch: pa.RecordBatch, out: HistoryOut
) -> int:
    """``tokens_as_sequence``: the row's tokens (as :func:`sparse` gives them) as a history of one token an item,
    the first ``s.max_length`` kept (TorchEasyRec's ``to_padded_dense(sequence_length)`` keeps the first);
    returns how many rows lost tokens."""
    (f,) = feats
    ids, counts, bad = sparse(f, batch)
    if bad is not None:
        out.bads.append(bad)
    kept = np.minimum(counts, s.max_length)
    cut = int((counts > kept).sum())
    if cut:
        pos = np.arange(ids.size) - np.repeat(np.cumsum(counts) - counts, counts)
        ids = ids[pos < np.repeat(kept, counts)]
    out.values[f.name], out.lengths[f.name] = ids, kept.astype(np.int32)
    return cut


def column(e: SparseFeature | SequenceFeature) -> tuple[ColumnKind, str]:
    return "text", TEXT


KIND = FeatureKind(name="tokenize", build=build, column=column, sparse=sparse, sequence=token_history)
