"""``recpipe predict --model EXPORT --data SOURCE --out scores.parquet``: batch scoring of any source."""

from __future__ import annotations

import argparse
import sys


def cmd_predict(a: argparse.Namespace) -> int:
    from recpipe.stages import predict

    r = predict.run(
        a.model, a.data, a.out, keep=a.keep, on_bad_row=a.on_bad_row, output=a.output,
        batch_rows=a.batch_rows, progress=sys.stderr.isatty() or a.progress,
    )  # fmt: skip
    print(
        f"wrote {r.out}: rows_read={r.rows_read} rows_scored={r.rows_scored} rows_skipped={r.rows_skipped}"
        f" ({r.rows_per_second:,.0f} rows/s, model {r.model})"
    )
    if r.skipped_by_column:
        print(f"skipped by column: {dict(sorted(r.skipped_by_column.items()))}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="score a file, folder or table with an exported model, streamed, into Parquet",
        description=(
            "Rows are read in batches (bounded memory), put through the export's fg.json exactly as at "
            "training, and scored; the output keeps the input's order: row, the --keep columns, then "
            "probability (or logit)."
        ),
        epilog="example: recpipe predict --model runs/x/export --data runs/x/data/eval --out scores.parquet "
        "--keep user_id --keep adgroup_id",
    )
    p.add_argument("--model", required=True, help="export folder (or one backend's folder, e.g. export/rtp)")
    p.add_argument("--data", required=True, help="Parquet/CSV file, folder or URI, or odps://… table")
    p.add_argument("--out", required=True, help="output Parquet file")
    p.add_argument(
        "--keep", action="append", default=[], metavar="COLUMN", help="input column copied to the output"
    )
    p.add_argument(
        "--on-bad-row",
        choices=["error", "skip"],
        default="error",
        help="stop at a bad row, or skip and count it",
    )
    p.add_argument("--output", choices=["probability", "logit"], default="probability", help="what to write")
    p.add_argument("--batch-rows", type=int, default=65_536, help="rows read and scored at a time")
    p.add_argument("--progress", action="store_true", help="show a progress bar even when not on a terminal")
    p.set_defaults(func=cmd_predict)
