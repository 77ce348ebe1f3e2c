"""``{NAME}`` placeholders in input paths, resolved at run time.

TorchEasyRec's example configs name their tables ``odps://{PROJECT}/tables/...`` and fill ``{PROJECT}``
with ``str.format`` when a run starts (``tzrec/benchmark/benchmark.py``: ``train_input_path.format(
PROJECT=project)``). A recpipe config keeps such a path as written and lists each name under
``data.params``: a value set there (``--set data.params.PROJECT=ads``) wins, else the environment
variable of the name (:func:`env_var`: ``ODPS_PROJECT`` for ``PROJECT``, ``RECPIPE_PARAM_<NAME>`` for
any other), read by the caller at process entry and passed in. Stdlib only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# recpipe's ODPS reader already takes the default project from ODPS_PROJECT (recpipe.data.odps).
_ENV = {"PROJECT": "ODPS_PROJECT"}


class UnresolvedPlaceholder(ValueError):
    """A ``{NAME}`` in an input path has neither a value in ``data.params`` nor its environment variable."""


def placeholders(text: str) -> list[str]:
    """The distinct ``{NAME}`` names in ``text``, in order.

    Example::

        >>> placeholders("odps://{PROJECT}/tables/t/ds={DS}")
        ['PROJECT', 'DS']
    """
    return list(dict.fromkeys(PLACEHOLDER.findall(text)))


def check_declared(uris: Iterable[str | None], params: Mapping[str, str | None]) -> None:
    """Raise ValueError naming the placeholders of ``uris`` that ``params`` (``data.params``) does not list."""
    undeclared = sorted({n for uri in uris if uri for n in placeholders(uri)} - set(params))
    if undeclared:
        raise ValueError(
            f"placeholders {undeclared} in data.train, data.eval or data.negative_sampler.input_path are not listed in data.params"
        )


def env_var(name: str) -> str:
    """The environment variable that gives placeholder ``name`` a value when ``data.params`` does not."""
    return _ENV.get(name, f"RECPIPE_PARAM_{name}")


def resolve(text: str, params: Mapping[str, str | None], environ: Mapping[str, str]) -> str:
    """``text`` with every ``{NAME}`` replaced by ``params[NAME]``, else ``environ[env_var(NAME)]``.

    Args:
        text (str): an input path, e.g. ``"odps://{PROJECT}/tables/criteo_train"``.
        params (Mapping[str, str | None]): the config's ``data.params``; None means "from the environment".
        environ (Mapping[str, str]): the process environment (``os.environ`` at the entry point).

    Raises:
        UnresolvedPlaceholder: a name has no value; the message says the two ways to give one.

    Example::

        >>> resolve("odps://{PROJECT}/tables/t", {"PROJECT": None}, {"ODPS_PROJECT": "ads"})
        'odps://ads/tables/t'
    """
    values: dict[str, str] = {}
    missing = []
    for name in placeholders(text):
        value = params.get(name) or environ.get(env_var(name))
        if value:
            values[name] = str(value)
        else:
            missing.append(name)
    if missing:
        ways = "; ".join(
            f"{{{n}}}: --set data.params.{n}=<value> or the environment variable {env_var(n)}"
            for n in missing
        )
        raise UnresolvedPlaceholder(f"input path {text!r} has placeholders without a value ({ways})")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
