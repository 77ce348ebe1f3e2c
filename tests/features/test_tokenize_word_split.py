"""Kind tokenize's word split (``_Tokenizer.encode_flat``): a tokenizer whose tokens never span an ASCII space
tokenizes each distinct word of a batch once, and the rows' ids equal tokenizing every text whole; any other
tokenizer takes the whole-text path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from map_kinds import config, every_representation

from recpipe.features.kinds import tokenize as kind

ROOT = Path(__file__).resolve().parents[2]
CORPUS = [
    "the quick brown fox",
    "jumps over the lazy dog",
    "Café crème, s'il vous plaît!",
    "北京 欢迎 你",
] * 30


def _wordpiece(path: Path, pre: str = "bert", normalizer: bool = True) -> Path:
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = {
        "bert": pre_tokenizers.BertPreTokenizer(),
        "sequence": pre_tokenizers.Sequence([pre_tokenizers.Punctuation(), pre_tokenizers.WhitespaceSplit()]),
        "bytelevel": pre_tokenizers.ByteLevel(add_prefix_space=False),
    }[pre]
    if normalizer:
        tok.normalizer = normalizers.BertNormalizer(lowercase=True, strip_accents=True)
    tok.train_from_iterator(CORPUS, trainers.WordPieceTrainer(vocab_size=80, special_tokens=["[UNK]"]))
    tok.save(str(path))
    return path


def _loaded(path: Path) -> kind._Tokenizer:
    return kind._Tokenizer("bpe", path.read_bytes(), str(path))


def _texts(seed: int, n: int) -> list[str]:
    """Texts with what a split at spaces could get wrong: runs of spaces, leading and trailing ones, tabs and
    newlines inside words' neighbourhood, punctuation glued to words, accents, CJK, unknown characters."""
    rng = np.random.default_rng(seed)
    words = [
        "the",
        "quick",
        "Brown",
        "fox,",
        "dog!",
        "Café",
        "crème",
        "北京欢迎",
        "you\tand",
        "x\ny",
        "zzzq",
        "",
        "ü",
    ]
    pool = [" ".join(rng.choice(words, rng.integers(1, 6))) for _ in range(60)]
    pool += ["  leading", "trailing  ", "a  b   c", " ", "\t"]
    return [pool[i] for i in rng.integers(0, len(pool), n)]


@pytest.mark.parametrize("pre", ["bert", "sequence"])
def test_the_word_split_equals_tokenizing_every_text(tmp_path: Path, pre: str, monkeypatch) -> None:
    tok = _loaded(_wordpiece(tmp_path / "t.json", pre))
    assert tok.splits_at_spaces
    texts = _texts(1, 3000)
    seen: list[list[str]] = []
    encode = kind._Tokenizer.encode
    monkeypatch.setattr(kind._Tokenizer, "encode", lambda self, t: seen.append(t) or encode(self, t))
    values, lengths = kind.encode_distinct(tok, pa.array(texts))
    (called,) = seen
    assert not any(" " in w for w in called) and len(called) == len(set(called))  # words, each once
    plain = [encode(tok, [t])[0] for t in texts]
    assert lengths.tolist() == [len(p) for p in plain]
    assert values.tolist() == [i for p in plain for i in p]
    assert sum(map(len, plain)) > len(texts)  # the texts do have tokens


def test_the_rich_configs_tokenizer_takes_the_word_split() -> None:
    path = ROOT / "configs" / "rich_taobao_small_tokenizer.json"
    tok = _loaded(path)
    assert tok.splits_at_spaces
    texts = _texts(2, 500)
    values, lengths = kind.encode_distinct(tok, pa.array(texts))
    plain = tok.encode(texts)
    assert lengths.tolist() == [len(p) for p in plain] and values.tolist() == [i for p in plain for i in p]


@pytest.mark.parametrize(
    "change",
    [
        {
            "pre_tokenizer": {
                "type": "ByteLevel",
                "add_prefix_space": False,
                "trim_offsets": True,
                "use_regex": True,
            }
        },
        {"pre_tokenizer": None},
        {"normalizer": {"type": "NFC"}},
        {"normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": ""}},
        {"truncation": {"direction": "Right", "max_length": 4, "strategy": "LongestFirst", "stride": 0}},
        {
            "added_tokens": [
                {
                    "id": 80,
                    "content": "new york",
                    "single_word": False,
                    "lstrip": False,
                    "rstrip": False,
                    "normalized": False,
                    "special": False,
                }
            ]
        },
    ],
    ids=["bytelevel", "none", "nfc", "replace", "truncation", "added_with_space"],
)
def test_a_tokenizer_whose_tokens_may_span_a_space_takes_the_whole_text_path(
    tmp_path: Path, change: dict
) -> None:
    config = json.loads(_wordpiece(tmp_path / "t.json").read_text())
    config.update(change)
    assert not kind._splits_at_spaces(config)
    # and the library still agrees with FG on that path (ByteLevel: "Ġ" tokens carry the space)
    if change.get("pre_tokenizer", {}) and change["pre_tokenizer"]["type"] == "ByteLevel":
        tok = _loaded(_wordpiece(tmp_path / "b.json", "bytelevel"))
        assert not tok.splits_at_spaces
        texts = _texts(3, 300)
        values, lengths = kind.encode_distinct(tok, pa.array(texts))
        plain = tok.encode(texts)
        assert lengths.tolist() == [len(p) for p in plain] and values.tolist() == [
            i for p in plain for i in p
        ]


def test_gather_runs() -> None:
    flat, per = np.array([1, 2, 3]), np.array([2, 1])
    values, lengths = kind.gather_runs(flat, per, np.array([1, 0, 1]))
    assert values.tolist() == [3, 1, 2, 3] and lengths.tolist() == [1, 2, 1]
    values, lengths = kind.gather_runs(flat, per, np.array([0, 1]))
    assert values.tolist() == [1, 2, 3] and lengths.tolist() == [2, 1]
    values, lengths = kind.gather_runs(np.zeros(0, np.int64), np.array([0, 0]), np.array([1, 1, 0]))
    assert values.tolist() == [] and lengths.tolist() == [0, 0, 0]


def test_the_word_memo_tokenizes_a_word_once_across_batches_and_stays_bounded(
    tmp_path: Path, monkeypatch
) -> None:
    tok = _loaded(_wordpiece(tmp_path / "t.json"))
    seen: list[list[str]] = []
    encode = kind._Tokenizer.encode
    monkeypatch.setattr(kind._Tokenizer, "encode", lambda self, t: seen.append(t) or encode(self, t))

    def check(texts: list[str]) -> None:
        values, lengths = kind.encode_distinct(tok, pa.array(texts))
        plain = [encode(tok, [t])[0] for t in texts]
        assert lengths.tolist() == [len(p) for p in plain] and values.tolist() == [
            i for p in plain for i in p
        ]

    check(["the quick fox", "the dog"])
    check(["quick dog the", "lazy fox"])  # only "lazy" is new
    assert [sorted(s) for s in seen[:2]] == [["dog", "fox", "quick", "the"], ["lazy"]]
    # a full memo is emptied before it would overflow: bounded, and the ids stay those of the library
    monkeypatch.setattr(kind, "MEMO_WORDS", 3)
    seen.clear()
    check(["over jumps brown", "café"])  # 4 new words, more than the memo holds: none kept
    check(["over the"])
    assert len(tok._memo) <= 3 and [sorted(s) for s in seen] == [
        ["brown", "café", "jumps", "over"],
        ["over", "the"],
    ]
    kind.clear_memos()


_TEXT = st.one_of(st.none(), st.text(alphabet=" abcé,!北\tü", max_size=14))


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(_TEXT, min_size=1, max_size=6))
def test_any_texts_give_the_librarys_ids_in_every_representation(tmp_path: Path, texts: list) -> None:
    """The raw-value contract of kind tokenize on the word-split path: a typed table, Parquet, CSV, a DataFrame
    (many rows and one), JSON records all give the library's ids of each text; a null or empty text none."""
    path = ROOT / "configs" / "rich_taobao_small_tokenizer.json"
    kind.clear_memos()
    feature = {"kind": "tokenize", "name": "title_tokens", "column": "title", "vocab_file": str(path)}
    # (a second column: a CSV line of one empty value is a blank line, which CSV readers skip)
    rows = [{"title": t, "k": i} for i, t in enumerate(texts)]
    out = every_representation(config(feature), rows, tmp_path)
    plain = _loaded(path).encode([t or "" for t in texts])
    assert out.lengths[0].tolist() == [len(p) for p in plain]
    assert out.values[0].tolist() == [i for p in plain for i in p]
