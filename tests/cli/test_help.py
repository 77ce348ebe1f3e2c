"""Every command and option explains itself: help text, an example, the exit codes, --version (issue 17)."""

from __future__ import annotations

import argparse
import re

import pytest

from recpipe import __version__
from recpipe.cli.main import build_parser, commands, main


def test_every_option_of_every_command_has_help_and_every_command_an_example():
    parser = build_parser()
    found = commands(parser)
    assert {"data generate", "ingest", "fit", "train", "evaluate", "export", "register", "promote"} <= set(
        found
    )
    for name, sp in found.items():
        text = sp.format_help()
        assert re.search(r"example:\s+recpipe ", text), name
        assert "exit codes: 0 success, 1 error, 2 usage or config error" in text, name
        for action in sp._actions:
            if not isinstance(action, argparse._HelpAction):
                assert action.help, f"recpipe {name} {action.option_strings or action.dest} has no help"


@pytest.mark.parametrize("command", ["ingest", "fit", "train", "run"])
def test_every_command_that_takes_a_config_takes_set(command):
    assert "--set KEY=VALUE" in commands(build_parser())[command].format_help()


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"recpipe {__version__}\n"


def test_evaluate_has_one_flag_per_gate_threshold() -> None:
    from recpipe.cli.stages_cli import GATE_THRESHOLDS
    from recpipe.config import GateConfig

    # Per-feature PSI limits are a mapping, and recall_k a cut-off, not a threshold: written in the config
    # (or --set), not a flag.
    fields = [f for f in GateConfig.model_fields if f not in ("max_psi_per_feature", "recall_k")]
    assert list(GATE_THRESHOLDS) == fields
