"""Tiny tokenizer files for the tests of kind tokenize (features, tzrec, data), built here with the libraries
themselves (no file of TorchEasyRec's is copied): a byte-level BPE ``tokenizer.json`` whose merges make the token split of
tokenize_feature_test.py ("abc efg" → 3 tokens, "hij" → 2, "xyz" → 1), and a SentencePiece BPE model."""

from __future__ import annotations

import io
from pathlib import Path

# The merges of the BPE fixture: "abc", "Ġef" (" ef"), "ij", "xyz" are tokens, every byte is one.
MERGES = [("a", "b"), ("ab", "c"), ("Ġ", "e"), ("Ġe", "f"), ("i", "j"), ("x", "y"), ("xy", "z")]
SPM_CORPUS = ["abc efg hij", "the quick brown fox", "hij klm abc", "xyz abc efg"] * 20


def write_bpe(path: Path, added: list[str] | None = None) -> Path:
    """A byte-level BPE tokenizer.json at ``path`` (``added``: special tokens appended to its vocabulary)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=MERGES))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if added:
        tok.add_special_tokens(added)
    tok.save(str(path))
    return path


def bpe_id(path: Path, token: str) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path)).token_to_id(token)


def write_sentencepiece(path: Path) -> Path:
    """A SentencePiece BPE model of 30 pieces trained on :data:`SPM_CORPUS` (deterministic)."""
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SPM_CORPUS),
        model_writer=out,
        vocab_size=30,
        model_type="bpe",
        num_threads=1,
        minloglevel=2,
    )
    path.write_bytes(out.getvalue())
    return path
