"""TorchEasyRec's tokenize_feature → recpipe kind tokenize, written as feature.md documents it (its
tokens_as_sequence example too, in a DIN's SEQUENCE group); what recpipe cannot honour (tokens_as_sequence without
sequence_length or of FG_NONE input, the normalizer options it cannot reproduce) is reported at its line."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from tokenizer_files import bpe_id, write_bpe
from tzrec_fixtures import HEAD

from recpipe.features.build import build_feature_spec
from recpipe.features.fg import FeatureGenerator
from recpipe.tzrec import import_tzrec
from recpipe.tzrec.problems import TzrecImportError


def _config(block: str) -> str:
    return (
        HEAD
        + f"feature_configs {{ {block} }}\n"
        + """\
model_config {
    feature_groups { group_name: "all" feature_names: ["title_token"] group_type: DEEP }
    multi_tower { towers { input: "all" mlp { hidden_units: [16] } } final { hidden_units: [8] } }
}
"""
    )


def test_the_documented_block_maps_and_runs(tmp_path: Path) -> None:
    write_bpe(tmp_path / "tokenizer.json")
    stop = tmp_path / "stop_char"
    stop.write_text("!\n")
    # feature.md's example, with the normalizer options recpipe reproduces and asset_dir joined as TorchEasyRec does
    block = (
        'tokenize_feature { feature_name: "title_token" expression: "item:title" vocab_file: "tokenizer.json" '
        f'asset_dir: "{tmp_path}" embedding_dim: 8 default_value: "xyz" pooling: "mean" '
        'text_normalizer { norm_options: [TEXT_UPPER2LOWER, TEXT_SBC2DBC, TEXT_FILTER] stop_char_file: "stop_char" } }'
    )
    imported = import_tzrec(_config(block))
    (feature,) = imported.data["features"]
    assert feature == {
        "kind": "tokenize",
        "name": "title_token",
        "column": "title",
        "vocab_file": str(tmp_path / "tokenizer.json"),
        "embedding_dim": 8,
        "pooling": "mean",
        "default_value": "xyz",
        "text_normalizer": {
            "norm_options": ["TEXT_UPPER2LOWER", "TEXT_SBC2DBC", "TEXT_FILTER"],
            "stop_char_file": str(tmp_path / "stop_char"),
        },
    }
    spec = build_feature_spec(imported.config)
    assert spec.tables()[0].num_embeddings == 263
    out = FeatureGenerator(spec)(pa.table({"title": ["ＡＢＣ! efg", None], "clk": [1, 0]}))
    path = tmp_path / "tokenizer.json"
    assert out.values[0].tolist() == [bpe_id(path, t) for t in ("abc", "Ġef", "g", "xyz")]
    assert out.lengths[0].tolist() == [3, 1]


def test_sentencepiece_and_pre_encoded_ids(tmp_path: Path) -> None:
    path = write_bpe(tmp_path / "tokenizer.json")
    block = (
        'tokenize_feature { feature_name: "title_token" expression: "item:title" '
        f'vocab_file: "{path}" embedding_dim: 8 tokenizer_type: "sentencepiece" }}'
    )
    (feature,) = import_tzrec(_config(block)).data["features"]
    assert feature["tokenizer_type"] == "sentencepiece"
    # FG_NONE: the column named after the feature holds FG's token ids, joined by fg_encoded_multival_sep
    text = _config(block.replace(' tokenizer_type: "sentencepiece"', "")).replace("FG_DAG", "FG_NONE")
    imported = import_tzrec(text)
    (feature,) = imported.data["features"]
    assert "column" not in feature and feature["separator"] == "\x03"
    spec = build_feature_spec(imported.config)
    out = FeatureGenerator(spec)(pa.table({"title_token": ["1\x032", "", None, "3"], "clk": [1, 0, 0, 1]}))
    assert out.values[0].tolist() == [1, 2, 3] and out.lengths[0].tolist() == [2, 0, 0, 1]


BASE = 'feature_name: "title_token" expression: "item:title" vocab_file: "t.json" embedding_dim: 8'


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ("tokens_as_sequence: true", "sequence_length", "tokens_as_sequence needs sequence_length"),
        ("text_normalizer {}", "text_normalizer.norm_options", "TEXT_CHT2CHS"),
        (
            "text_normalizer { norm_options: [TEXT_CHT2CHS] }",
            "text_normalizer.norm_options",
            "conversion table",
        ),
        ("text_normalizer { norm_options: [TEXT_FILTER] }", "text_normalizer.norm_options", "a download"),
        (
            "text_normalizer { norm_options: [TEXT_UPPER2LOWER] max_length: 10 }",
            "text_normalizer.max_length",
            "bytes or characters",
        ),
        ('tokenizer_type: "wordpiece"', "tokenizer_type", "not one of ['bpe', 'sentencepiece']"),
        ("", "expression", "tokenize_feature reads a text column"),
    ],
)
def test_what_recpipe_cannot_honour_is_reported(extra: str, field: str, message: str) -> None:
    base = BASE if extra else BASE.replace('"item:title"', '"feature:x"')
    block = f"tokenize_feature {{ {base} {extra} }}"
    text = _config(block)
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    (problem,) = err.value.problems
    assert problem.path == f"feature_configs[0].tokenize_feature.{field}" and message in problem.message
    assert problem.line == text.splitlines().index(f"feature_configs {{ {block} }}") + 1


# feature.md's tokens_as_sequence example (title_token, sequence_length 32) as the history of a DIN's SEQUENCE
# group, whose query is the user's query tokenized by the same tokenizer into the same table.
TOKENS_AS_SEQUENCE = (
    HEAD
    + """\
feature_configs { id_feature { feature_name: "item" expression: "item:item" num_buckets: 20 embedding_dim: 8 } }
feature_configs { tokenize_feature { feature_name: "query_token" expression: "user:query"
    vocab_file: "VOCAB" embedding_dim: 8 embedding_name: "tokens" } }
feature_configs { tokenize_feature { feature_name: "title_token" expression: "item:title"
    vocab_file: "VOCAB" embedding_dim: 8 embedding_name: "tokens" tokens_as_sequence: true sequence_length: 32 } }
model_config {
    feature_groups { group_name: "deep" feature_names: ["item"] group_type: DEEP }
    feature_groups { group_name: "seq" feature_names: ["query_token", "title_token"] group_type: SEQUENCE }
    multi_tower_din {
        towers { input: "deep" mlp { hidden_units: [8] } }
        din_towers { input: "seq" attn_mlp { hidden_units: [8] } }
        final { hidden_units: [8] }
    }
}
"""
)


def test_tokens_as_sequence_maps_to_a_history_a_din_group_reads(tmp_path: Path) -> None:
    path = write_bpe(tmp_path / "tokenizer.json")
    imported = import_tzrec(TOKENS_AS_SEQUENCE.replace("VOCAB", str(path)))
    features = {f["name"]: f for f in imported.data["features"]}
    assert features["title_token"] == {
        "kind": "tokenize",
        "name": "title_token",
        "column": "title",
        "vocab_file": str(path),
        "embedding_dim": 8,
        "embedding_name": "query_token",  # TorchEasyRec's shared table "tokens", named after its first feature
        "tokens_as_sequence": True,
        "sequence_length": 32,
    }
    assert "tokens_as_sequence" not in features["query_token"]
    spec = build_feature_spec(imported.config)
    assert [s.name for s in spec.sequences] == ["title_token"] and spec.feature("title_token").sequence
    assert spec.feature("title_token").table == spec.feature("query_token").table
    rows = pa.table({"item": [1, 2], "query": ["abc", "hij"], "title": ["abc efg", None], "clk": [1, 0]})
    out = FeatureGenerator(spec)(rows)
    k = spec.sparse_keys().index("title_token")
    # one token an item; a missing title is TorchEasyRec's default "0" tokenized
    assert out.values[k].tolist() == [bpe_id(path, t) for t in ("abc", "Ġef", "g", "0")]
    assert out.lengths[k].tolist() == [3, 1]


def test_tokens_as_sequence_of_pre_encoded_ids_is_refused(tmp_path: Path) -> None:
    text = TOKENS_AS_SEQUENCE.replace("VOCAB", str(write_bpe(tmp_path / "t.json"))).replace(
        "FG_DAG", "FG_NONE"
    )
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(text)
    (problem,) = err.value.problems
    assert problem.path == "feature_configs[2].tokenize_feature.tokens_as_sequence"
    assert "pre-encoded input (FG_NONE" in problem.message
