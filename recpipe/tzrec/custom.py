"""TorchEasyRec's ``custom_feature`` (feature.proto ``CustomFeature``): a user's compiled FG operator
(``operator_lib_file``, a C++ plugin of pyfg), which recpipe's FG cannot run. Refused at its line, or, with the
explicit opt-in ``drop_custom_features`` (``recpipe config import-tzrec --drop-custom-features``), dropped with
its uses in feature groups, each dropped name listed in the import's notes (never silently)."""

from __future__ import annotations

from typing import Any

from recpipe.tzrec.problems import Findings

CUSTOM_FEATURE_REFUSED = (
    "custom_feature is not supported: it runs a compiled FG operator (operator_lib_file, a C++ plugin of "
    "pyfg such as libedit_distance.so) that recpipe's FG cannot load or reproduce; compute the value "
    "upstream into a column and read it as a raw_feature or id_feature (or import with "
    "--drop-custom-features to leave it out)"
)


def custom_features(msg: Any, found: Findings, drop: bool) -> list[str]:
    """Refuse each ``custom_feature`` once, at its line (its own fields, which recpipe does not read, are no
    problems of their own), or with ``drop`` note it dropped. Returns the dropped feature names, in order."""
    dropped: list[str] = []
    for i, fc in enumerate(msg.feature_configs):
        if fc.WhichOneof("feature") != "custom_feature":
            continue
        path = f"feature_configs[{i}].custom_feature"
        found.problems = [q for q in found.problems if not (q.path == path or q.path.startswith(path + "."))]
        name = fc.custom_feature.feature_name
        if not drop:
            found.problem(path, CUSTOM_FEATURE_REFUSED)
            continue
        groups = [
            g.group_name
            for g in msg.model_config.feature_groups
            if name in g.feature_names or any(name in sg.feature_names for sg in g.sequence_groups)
        ]
        found.note(
            path,
            f"dropped (--drop-custom-features): custom_feature {name!r} runs a compiled FG operator "
            f"({fc.custom_feature.operator_name or '?'}); removed from feature groups {groups}",
        )
        dropped.append(name)
    return dropped
