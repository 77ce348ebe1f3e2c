"""Write configs/rich_taobao_small_tokenizer.json: the BPE ``tokenizer.json`` of the rich config's tokenize
feature (``title_tokens``), trained here with the HuggingFace ``tokenizers`` library on the words
``synthetic:config`` writes in its ``ad_title`` column (``adtitle0`` … ``adtitle99999``: a words space's prefix
and index, recpipe/data/synthetic/config.py ``_build_space``; 100,000 is its largest vocabulary).

A whitespace pre-tokenizer, no normalizer, ``[UNK]`` for a character it never saw; ``--vocab-size`` tokens
(default 200: the prefix's pieces and digit groups, a file of a few KB, committed next to the config; it
travels inside fg.json as every tokenize feature's file does). Training is deterministic: rerunning the script
rewrites the same bytes.

Run: ``.venv/bin/python scripts/make_rich_tokenizer.py`` (a second).
"""

from __future__ import annotations

import argparse
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "configs" / "rich_taobao_small_tokenizer.json"
PREFIX, WORDS = "adtitle", 100_000


def train_tokenizer(vocab_size: int) -> str:
    """The tokenizer.json text of a BPE of ``vocab_size`` tokens trained on the synthetic title words."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["[UNK]"], show_progress=False)
    tok.train_from_iterator((f"{PREFIX}{i}" for i in range(WORDS)), trainer=trainer, length=WORDS)
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
