"""Kind ``tokenize`` (TorchEasyRec's tokenize_feature): tokenize_feature_test.py's cases on fixture tokenizers
built here (its token split: "abc efg" → 3 tokens, "" → none or the default's, "hij" → 2), SentencePiece,
pre-encoded ids, the text normalizer options recpipe reproduces and the ones it refuses, the raw-value contract,
and fg.json carrying the tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from map_kinds import config, every_representation, ids, round_trip, spec_of
from tokenizer_files import bpe_id, write_bpe, write_sentencepiece

from recpipe.config import ConfigError, parse_config
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.features.spec import FeatureSpec, FeatureSpecError


@pytest.fixture
def bpe(tmp_path: Path) -> Path:
    return write_bpe(tmp_path / "tokenizer.json")


def token(vocab_file: Path, **kw) -> dict:
    return {
        "kind": "tokenize",
        "name": "token_feat",
        "column": "token_input",
        "vocab_file": str(vocab_file),
        **kw,
    }


def tok_ids(path: Path, *tokens: str) -> list[int]:
    return [bpe_id(path, t) for t in tokens]


@pytest.mark.parametrize(
    ("default", "texts", "norm", "want_tokens", "lengths"),
    [
        # tokenize_feature_test.py, test_tokenize_feature: (default_value, input, use_text_norm, values, lengths)
        ("", ["abc efg", "", "hij"], False, ["abc", "Ġef", "g", "h", "ij"], [3, 0, 2]),
        ("xyz", ["abc efg", "", "hij"], False, ["abc", "Ġef", "g", "xyz", "h", "ij"], [3, 1, 2]),
        ("", ["ABC efg", "", "HIJ"], True, ["abc", "Ġef", "g", "h", "ij"], [3, 0, 2]),
    ],
)
def test_tokenize_feature_test_cases(bpe: Path, default, texts, norm, want_tokens, lengths) -> None:
    kw = {"text_normalizer": {"norm_options": ["TEXT_UPPER2LOWER"]}} if norm else {}
    spec = spec_of(token(bpe, embedding_dim=16, default_value=default, **kw))
    out = FeatureGenerator(spec, with_labels=False)(pa.table({"token_input": texts}))
    assert out.values[0].tolist() == tok_ids(bpe, *want_tokens)
    assert out.lengths[0].tolist() == lengths
    # num_embeddings is the vocabulary size: 256 bytes + 7 merges (TorchEasyRec's 50277 of its tokenizer.json).
    (table,) = spec.tables()
    assert (table.num_embeddings, table.embedding_dim, table.feature_names) == (263, 16, ["token_feat"])


def test_added_tokens_count_in_the_vocabulary(tmp_path: Path) -> None:
    path = write_bpe(tmp_path / "tokenizer.json", added=["<pad>", "<s>"])
    spec = spec_of(token(path))
    assert spec.tables()[0].num_embeddings == 265
    # No special token is added to the text (tokenizers-cpp's Encode), but one written in it is its id.
    assert ids(spec, {"token_input": ["<s>abc"]}) == [[bpe_id(path, "<s>"), bpe_id(path, "abc")]]
    assert bpe_id(path, "<s>") == 264


def test_sentencepiece(tmp_path: Path) -> None:
    import sentencepiece as spm

    path = write_sentencepiece(tmp_path / "spiece.model")
    sp = spm.SentencePieceProcessor(model_file=str(path))
    texts = ["abc efg", "", "hij"]
    for default in ("", "xyz"):
        spec = spec_of(token(path, tokenizer_type="sentencepiece", default_value=default))
        assert spec.tables()[0].num_embeddings == sp.get_piece_size() == 30
        got = ids(spec, {"token_input": texts})
        # test_tokenize_feature_sentencepiece: "" has no token, or the default's
        assert got == [sp.encode("abc efg"), sp.encode(default) if default else [], sp.encode("hij")]
        assert len(got[0]) == 4 and len(got[1]) == (4 if default else 0)


@pytest.mark.parametrize(
    "column",
    [
        # tokenize_feature_test.py, test_fg_encoded_tokenize_feature (fg_encoded_multival_sep "\x03")
        pa.array(["1\x032", "", None, "3"]),
        pa.array([[1, 2], None, None, [3]]),
    ],
)
def test_pre_encoded_token_ids(bpe: Path, column: pa.Array) -> None:
    cfg = parse_config(
        {
            **config(token(bpe, separator="\x03")).model_dump(exclude_unset=True),
            "data": {"label": "label", "fg_encoded": True},
        }
    )
    spec = build_feature_spec(cfg)
    (entry,) = spec.sparse
    assert entry.kind == "id" and entry.column == "token_input" and entry.mapping.size == 263
    out = FeatureGenerator(spec, with_labels=False)(pa.table({"token_input": column}))
    assert out.values[0].tolist() == [1, 2, 3] and out.lengths[0].tolist() == [2, 0, 0, 1]


def test_text_normalizer_options(bpe: Path, tmp_path: Path) -> None:
    def norm(*options: str, **kw) -> FeatureSpec:
        return spec_of(token(bpe, text_normalizer={"norm_options": list(options), **kw}))

    abc = tok_ids(bpe, "abc")
    abc_efg = tok_ids(bpe, "abc", "Ġef", "g")
    # full-width → half-width, then case: "ＡＢＣ　ＥＦＧ" is "abc efg"
    assert ids(norm("TEXT_UPPER2LOWER", "TEXT_SBC2DBC"), {"token_input": ["ＡＢＣ　ＥＦＧ"]}) == [abc_efg]
    assert ids(norm("TEXT_LOWER2UPPER"), {"token_input": ["abc"]}) == [tok_ids(bpe, "A", "B", "C")]
    assert ids(norm("TEXT_REMOVE_SPACE"), {"token_input": ["a b c"]}) == [abc]
    stop = tmp_path / "stop_char"
    stop.write_text("!\n#]\n", encoding="utf-8")
    spec = norm("TEXT_FILTER", stop_char_file=str(stop))
    assert ids(spec, {"token_input": ["a!b#c]", "!#"]}) == [abc, []]  # all stop characters: a missing text
    split = ids(norm("TEXT_SPLITCHRS"), {"token_input": ["我爱abc"]})
    assert split == ids(spec_of(token(bpe)), {"token_input": ["我 爱 abc"]})
    # a text normalized to nothing takes the default, which is not normalized (it is the tokenizer's input)
    spec = spec_of(token(bpe, default_value="XYZ", text_normalizer={"norm_options": ["TEXT_REMOVE_SPACE"]}))
    assert ids(spec, {"token_input": ["  ", None]}) == [tok_ids(bpe, "X", "Y", "Z")] * 2


@pytest.mark.parametrize(
    ("normalizer", "why"),
    [
        ({}, "TEXT_CHT2CHS .* conversion table"),  # TorchEasyRec's defaults include it
        ({"norm_options": ["TEXT_CHT2CHS"]}, "TEXT_CHT2CHS"),
        ({"norm_options": ["TEXT_FILTER"]}, "built-in stop list, a download"),
        ({"norm_options": ["TEXT_LOWER2UPPER", "TEXT_UPPER2LOWER"]}, "contradict"),
        ({"norm_options": ["TEXT_UPPER2LOWER"], "max_length": 10}, "bytes or characters"),
        ({"norm_options": ["TEXT_UPPER2LOWER"], "stop_char_file": "x"}, "TEXT_FILTER's"),
    ],
)
def test_normalizer_options_recpipe_cannot_reproduce_are_refused(bpe: Path, normalizer, why) -> None:
    with pytest.raises(ConfigError, match=rf"feature 'token_feat': text_normalizer: .*{why}"):
        config(token(bpe, text_normalizer=normalizer))


def test_other_mistakes_are_refused(bpe: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TEXT_UNKNOWN|norm_options"):
        config(token(bpe, text_normalizer={"norm_options": ["TEXT_UNKNOWN"]}))
    with pytest.raises(ConfigError, match="tokenizer_type"):
        config(token(bpe, tokenizer_type="wordpiece"))
    with pytest.raises(ConfigError, match="tokens_as_sequence"):
        config(token(bpe, tokens_as_sequence=True))
    with pytest.raises(FeatureSpecError, match="feature 'token_feat': vocab_file .* does not exist"):
        spec_of(token(tmp_path / "nope.json"))
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(FeatureSpecError, match="feature 'token_feat'.*not a bpe tokenizer file"):
        spec_of(token(tmp_path / "bad.json"))
    with pytest.raises(FeatureSpecError, match="not a sentencepiece tokenizer file"):
        spec_of(token(bpe, tokenizer_type="sentencepiece"))
    with pytest.raises(FeatureSpecError, match="stop_char_file .* does not exist"):
        spec_of(token(bpe, text_normalizer={"norm_options": ["TEXT_FILTER"], "stop_char_file": "/no/file"}))


def test_the_raw_value_contract(bpe: Path, tmp_path: Path) -> None:
    cfg = config(token(bpe), {**token(bpe, default_value="xyz"), "name": "with_default"})
    # (a second column: a CSV line of one empty value is a blank line, which CSV readers skip)
    texts = ["abc efg", None, "", "hij"]
    rows = [{"token_input": t, "k": i} for i, t in enumerate(texts)]
    out = every_representation(cfg, rows, tmp_path)
    assert out.lengths[0].tolist() == [3, 0, 0, 2] and out.lengths[1].tolist() == [3, 1, 1, 2]
    spec = build_feature_spec(cfg)
    # a column a request leaves out is missing in every row
    assert ids(spec, {"other": [1, 2]}) == [[], []] and ids(spec, {"other": [1]}, key=1) == [
        tok_ids(bpe, "xyz")
    ]
    # a value that is not text is a bad row naming the column
    with pytest.raises(BadRowError, match=r"row 1, column 'token_input': expected text to tokenize"):
        ids(spec, {"token_input": pa.array([None, 7])})
    gen = FeatureGenerator(spec_of(token(bpe)), on_bad_row="skip", with_labels=False)
    out = gen(pa.table({"token_input": pa.array([[1], None, [2]])}))
    assert out.num_rows == 1 and gen.stats.skipped_by_column == {"token_input": 2}


def test_fg_json_carries_the_tokenizer(bpe: Path, tmp_path: Path) -> None:
    stop = tmp_path / "stop_char"
    stop.write_text("!")
    norm = {"norm_options": ["TEXT_FILTER", "TEXT_UPPER2LOWER"], "stop_char_file": str(stop)}
    spec = spec_of(token(bpe, default_value="xyz", pooling="mean", text_normalizer=norm))
    (entry,) = spec.sparse
    assert entry.kind == "tokenize" and entry.pooling == "mean"
    assert entry.params["norm_options"] == ["TEXT_UPPER2LOWER", "TEXT_FILTER"]
    assert entry.params["stop_chars"] == "!" and entry.params["vocab_file"] == str(bpe)
    rows = pa.table({"token_input": ["ABC! efg", None, "h!ij"]})
    round_trip(spec, rows)
    want = ids(spec, rows)
    assert want == [tok_ids(bpe, "abc", "Ġef", "g"), tok_ids(bpe, "xyz"), tok_ids(bpe, "h", "ij")]
    # fg.json alone rebuilds it: the tokenizer and the stop characters travel inside it.
    folder = tmp_path / "export"
    spec.save(folder / "fg.json")
    bpe.unlink()
    stop.unlink()
    assert ids(FeatureSpec.load(folder), rows) == want
    # another tokenizer file is another spec
    stop.write_text("!")
    other = spec_of(
        token(
            write_bpe(tmp_path / "tokenizer.json", added=["<s>"]), default_value="xyz", text_normalizer=norm
        )
    )
    assert other.digest() != spec.digest()
    # bytes that do not match their sha256 are refused when the tokenizer is loaded
    d = json.loads((folder / "fg.json").read_text())
    d["sparse"][0]["params"]["vocab_sha256"] = "0" * 64
    with pytest.raises(FeatureSpecError, match="do not match their sha256"):
        ids(FeatureSpec.from_dict(d), rows)


def test_a_large_batch_is_one_library_call(bpe: Path) -> None:
    rng = np.random.default_rng(0)
    words = np.array(["abc", "efg", "hij", "xyz", "ABC"])
    texts = [" ".join(words[rng.integers(0, 5, rng.integers(0, 4))]) for _ in range(2000)]
    spec = spec_of(token(bpe))
    got = ids(spec, {"token_input": texts})
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(bpe))
    assert got == [tok.encode(t, add_special_tokens=False).ids if t else [] for t in texts]


@pytest.mark.parametrize("repeats", ["many", "none", "one_text"])
def test_distinct_texts_are_tokenized_once_and_gathered_as_every_row(
    bpe: Path, repeats: str, monkeypatch
) -> None:
    """The batch's distinct texts go to the tokenizer once each; the rows' ids equal tokenizing each row."""
    from recpipe.features.kinds import tokenize as kind

    rng = np.random.default_rng(3)
    words = np.array(["abc", "efg", "hij", "xyz", "klm"])
    if repeats == "many":
        pool = [" ".join(words[rng.integers(0, 5, rng.integers(1, 4))]) for _ in range(30)]
        texts = [pool[i] for i in rng.integers(0, 30, 500)]
    elif repeats == "none":
        texts = [f"{' '.join(words[rng.integers(0, 5, 2)])} {i}" for i in range(200)]
    else:
        texts = ["abc efg"] * 50
    spec = spec_of(token(bpe))
    tok = kind.tokenizer(spec.sparse[0])
    seen: list[list[str]] = []
    encode = kind._Tokenizer.encode
    monkeypatch.setattr(kind._Tokenizer, "encode", lambda self, t: seen.append(t) or encode(self, t))
    values, lengths = kind.encode_distinct(tok, pa.array(texts))
    plain = [encode(tok, [t])[0] for t in texts]  # the plain path: every row tokenized by itself
    assert lengths.tolist() == [len(p) for p in plain]
    assert values.tolist() == [i for p in plain for i in p]
    assert [sorted(s) for s in seen] == [sorted(set(texts))]
    # Through FG, two batches of one spec: each batch's own texts (nothing carried from the first).
    fg = FeatureGenerator(spec, with_labels=False)
    first = fg(pa.table({"token_input": texts})).values[0].tolist()
    second = fg(pa.table({"token_input": ["hij", "abc efg", None]})).values[0].tolist()
    assert first == values.tolist() and second == tok_ids(bpe, "h", "ij", "abc", "Ġef", "g")


def seq_config(vocab_file: Path, **kw) -> dict:
    """tokens_as_sequence's example of feature.md (the tokens a history, sequence_length 32 there, 16 in
    tokenize_feature_test.py) read by a DIN tower whose query is a pooled tokenize feature of the same table."""
    tokens = token(vocab_file, embedding_dim=16, embedding_name="tokens", tokens_as_sequence=True,
                   sequence_length=16, **kw)  # fmt: skip
    query = {"kind": "tokenize", "name": "query_tokens", "column": "query", "vocab_file": str(vocab_file),
             "embedding_dim": 16, "embedding_name": "tokens"}  # fmt: skip
    return {
        "name": "tokens_as_sequence",
        "data": {"label": "label"},
        "features": [{"kind": "id", "name": "item", "num_buckets": 10, "embedding_dim": 8}, query, tokens],
        "feature_groups": [
            {"name": "deep", "type": "deep", "features": ["item"]},
            {"name": "seq", "type": "sequence", "features": ["query_tokens", "token_feat"]},
        ],
        "model": {
            "type": "multi_tower_din",
            "towers": [{"group": "deep", "mlp": {"hidden_units": [8]}}],
            "din_towers": [{"group": "seq", "attn_mlp": {"hidden_units": [8]}}],
            "final": {"hidden_units": [8]},
        },
    }


def seq_spec(vocab_file: Path, **kw) -> FeatureSpec:
    return build_feature_spec(parse_config(seq_config(vocab_file, **kw)))


@pytest.mark.parametrize(
    ("default", "want_tokens", "seq_lengths"),
    [
        # tokenize_feature_test.py test_tokens_as_sequence: default "xyz", ["abc efg", "", "hij"] -> key_lengths
        # all 1 (one token an item), seq_lengths [3, 1, 2]
        ("xyz", ["abc", "Ġef", "g", "xyz", "h", "ij"], [3, 1, 2]),
        # no default_value: TorchEasyRec's fg_json makes it "0", tokenized (the fixture spells it as byte "0")
        ("", ["abc", "Ġef", "g", "0", "h", "ij"], [3, 1, 2]),
    ],
)
def test_tokens_as_sequence(bpe: Path, default: str, want_tokens: list[str], seq_lengths: list[int]) -> None:
    spec = seq_spec(bpe, default_value=default)
    entry = spec.feature("token_feat")
    (history,) = spec.sequences
    assert entry.sequence == "token_feat" and history.kind == "tokenize" and history.max_length == 16
    assert spec.feature("query_tokens").sequence is None and entry.table == "tokens"
    rows = {"item": [1, 2, 3], "query": ["abc", None, "xyz"], "token_input": ["abc efg", "", "hij"]}
    out = FeatureGenerator(spec, with_labels=False)(pa.table(rows))
    k = spec.sparse_keys().index("token_feat")
    assert out.values[k].tolist() == tok_ids(bpe, *want_tokens)
    assert out.lengths[k].tolist() == seq_lengths


def test_tokens_as_sequence_keeps_the_first_sequence_length_tokens(bpe: Path) -> None:
    d = seq_config(bpe)
    d["features"][-1]["sequence_length"] = 2
    spec = build_feature_spec(parse_config(d))
    fg = FeatureGenerator(spec, with_labels=False)
    out = fg(pa.table({"item": [1, 2, 3], "query": ["abc"] * 3, "token_input": ["abc efg", None, "hij abc"]}))
    k = spec.sparse_keys().index("token_feat")
    assert out.lengths[k].tolist() == [2, 1, 2]
    assert out.values[k].tolist() == tok_ids(bpe, "abc", "Ġef", "0", "h", "ij")
    assert fg.stats.truncated_histories == 2
    # fg.json round trip: the history and its key come back as they were
    assert FeatureSpec.from_dict(spec.to_dict()).sequences == spec.sequences


def test_tokens_as_sequence_settings_are_checked(bpe: Path) -> None:
    with pytest.raises(ConfigError, match="tokens_as_sequence needs sequence_length"):
        parse_config(config_dict(token(bpe, tokens_as_sequence=True)))
    with pytest.raises(ConfigError, match="sequence_length is a setting of tokens_as_sequence"):
        parse_config(config_dict(token(bpe, sequence_length=4)))
    with pytest.raises(FeatureSpecError, match="lists sequence sub-features"):  # a history in a deep group
        spec_of(token(bpe, tokens_as_sequence=True, sequence_length=4))


def config_dict(feature: dict) -> dict:
    return {
        "name": "t",
        "data": {"label": "label"},
        "features": [feature],
        "feature_groups": [{"name": "all", "type": "deep", "features": [feature["name"]]}],
        "model": {
            "type": "dlrm",
            "dense_mlp": {"hidden_units": [8]},
            "over_mlp": {"hidden_units": [8]},
            "sparse_group": "all",
        },  # fmt: skip
    }
