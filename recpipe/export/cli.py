"""``recpipe export --checkpoint DIR --backends jit,aoti,onnx,rtp,trt --out DIR [--data URI]``."""

from __future__ import annotations

import argparse
import sys

from recpipe.export.backends import BACKENDS, DEFAULT_BACKENDS


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="recpipe export", description=__doc__)
    parser.add_argument("--checkpoint", required=True, help="checkpoint folder (or a training output folder)")
    parser.add_argument(
        "--backends", default=",".join(DEFAULT_BACKENDS), help=f"comma-separated, any of {','.join(BACKENDS)}"
    )
    parser.add_argument("--out", required=True, help="output folder; one sub-folder per backend")
    parser.add_argument(
        "--data", default=None, help="held-out rows with labels for parity (default: the config's data.eval)"
    )
    parser.add_argument("--max-shard-mb", type=int, default=512, help="largest safetensors shard, MiB")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the export; prints one line per backend. Returns 0, or 1 when the export failed."""
    args = build_parser().parse_args(argv)
    from recpipe.export.checkpoint import export_checkpoint
    from recpipe.export.manifest import ExportError
    from recpipe.train.checkpoint import CheckpointError

    try:
        result = export_checkpoint(
            args.checkpoint, args.backends, args.out, args.data, max_shard_bytes=args.max_shard_mb << 20
        )
    except (ExportError, CheckpointError, ValueError) as err:
        print(f"recpipe export: {err}", file=sys.stderr)
        return 1
    print(result.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
