"""Write configs/rich_taobao_small_tokenizer.json: the WordPiece ``tokenizer.json`` of the rich config's tokenize
feature (``title_tokens``), trained here with the HuggingFace ``tokenizers`` library on the words
``synthetic:config`` writes in its ``ad_title`` column (``adtitle0`` … ``adtitle99999``: a words space's prefix
and index, recpipe/data/synthetic/config.py ``_build_space``; 100,000 is its largest vocabulary).

WordPiece (greedy longest match, ``##`` before a word's later pieces) after a split at whitespace, no normalizer,
``[UNK]`` for a word it cannot spell; ``--vocab-size`` tokens (default 200: the prefix's pieces and digit
groups, a file of a few KB, committed next to the config; it travels inside fg.json as every tokenize
feature's file does; recpipe's ``tokenizer_type: bpe`` is any HuggingFace tokenizer.json, as tokenizers-cpp
reads it). WordPiece after a plain whitespace split rather than BPE after the regex ``Whitespace`` split: the
same words cost the library about 0.6x the time (measured on the rich config's titles), and the FG
throughput goal counts every row. The committed file is one run's: the library's trainers break ties of equal
counts in no fixed order, so a rerun may keep other pieces of the same frequency (and fg.json's digest
changes); tests read the committed file, never a fresh run's ids.

Run: ``.venv/bin/python scripts/make_rich_tokenizer.py`` (a second).
"""

from __future__ import annotations

import argparse
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "configs" / "rich_taobao_small_tokenizer.json"
PREFIX, WORDS = "adtitle", 100_000
ZIPF_TOP = 5_000  # the times word 0 is in the training corpus


def train_tokenizer(vocab_size: int) -> str:
    """The tokenizer.json text of a WordPiece of ``vocab_size`` tokens trained on the synthetic title words."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    # The vocabulary is learnt by the BPE trainer (with WordPiece's "##" before a word's later pieces) on the
    # words as often as synthetic:config draws them (Zipf: word i about 1/(i+1) as often as word 0); ids are
    # given in (length, text) order.
    bpe = Tokenizer(models.BPE(unk_token="[UNK]", continuing_subword_prefix="##"))
    bpe.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["[UNK]"], continuing_subword_prefix="##", show_progress=False
    )
    corpus = [f"{PREFIX}{i}" for i in range(WORDS) for _ in range(max(1, ZIPF_TOP // (i + 1)))]
    bpe.train_from_iterator(corpus, trainer=trainer, length=len(corpus))
    tokens = sorted(set(bpe.get_vocab()) - {"[UNK]"}, key=lambda t: (len(t), t))
    vocab = {t: i for i, t in enumerate(["[UNK]", *tokens])}
    tok = Tokenizer(models.WordPiece(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok.to_str()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--vocab-size", type=int, default=200)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    text = train_tokenizer(args.vocab_size)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(text) + 1} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
