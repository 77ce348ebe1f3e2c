"""``recpipe config import-tzrec IN.config -o OUT.yaml``: a TorchEasyRec config as recpipe YAML."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_import_tzrec(a: argparse.Namespace) -> int:
    from recpipe.tzrec import import_tzrec_file

    imported = import_tzrec_file(a.config, name=a.name, drop_custom_features=a.drop_custom_features)
    text = imported.to_yaml()
    if a.out == "-":
        sys.stdout.write(text)
    else:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(text)
        cfg = imported.config
        print(
            f"wrote {a.out}: {cfg.model_type}, {len(cfg.features)} features, "
            f"{len(cfg.feature_groups)} feature groups",
            file=sys.stderr,
        )
    for note in imported.notes:
        print(f"note: {note}", file=sys.stderr)
    print(imported.summary, file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("config", help="recpipe configs").add_subparsers(dest="config_command", required=True)
    t = c.add_parser(
        "import-tzrec",
        help="convert a TorchEasyRec pipeline config (protobuf text) to recpipe YAML",
        description="Every unsupported field or value is reported with its line; nothing is dropped silently.",
    )
    t.add_argument("config", help="TorchEasyRec config, e.g. multi_tower_din_taobao.config")
    t.add_argument("-o", "--out", required=True, help="recpipe YAML to write ('-' for stdout)")
    t.add_argument("--name", default=None, help="recpipe config name (default: the last part of model_dir)")
    t.add_argument(
        "--drop-custom-features",
        action="store_true",
        help="leave out each custom_feature (a compiled FG operator recpipe cannot run) and its uses in feature "
        "groups, each dropped name printed as a note, instead of refusing the config",
    )
    t.set_defaults(func=cmd_import_tzrec)
