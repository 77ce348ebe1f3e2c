"""The Dockerfiles, linted offline (no hadolint, no Docker engine here): the rules that matter for these
images, written as tests. Pinned bases, no ``latest``, no ``ADD`` of URLs, a numeric non-root ``USER`` at the
end, ``pip --no-cache-dir`` with exact versions, ``apt-get`` without recommends and with its lists removed,
the lock copied and installed before the source, the pins of the Makefile, and a build context that holds
what the image copies and nothing else."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
IDS = [p.parent.name for p in DOCKERFILES]
EXACT_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9_,-]+\])?==[A-Za-z0-9.+!-]+$")
PIP_OPTIONS_WITH_VALUE = {
    "-r",
    "-c",
    "--index-url",
    "-i",
    "--extra-index-url",
    "--target",
    "-t",
    "--constraint",
}


@dataclass
class Instruction:
    op: str
    args: str
    line: int


def parse(path: Path) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped (as the Docker parser does)."""
    out: list[Instruction] = []
    buf, start = "", 0
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = n
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        op, _, args = buf.partition(" ")
        out.append(Instruction(op.upper(), args.strip(), start))
        buf = ""
    assert not buf, f"{path}: dangling line continuation"
    return out


def stages(instructions: list[Instruction]) -> tuple[dict[str, str], list[list[Instruction]]]:
    """(global ARG defaults, instructions of each stage, FROM first)."""
    args: dict[str, str] = {}
    result: list[list[Instruction]] = []
    for ins in instructions:
        if ins.op == "FROM":
            result.append([ins])
        elif result:
            result[-1].append(ins)
        elif ins.op == "ARG" and "=" in ins.args:
            k, v = ins.args.split("=", 1)
            args[k] = v
    return args, result


def substitute(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), text)


def shell_commands(run: str) -> list[list[str]]:
    """A RUN line split into its commands (&&, ;, ||), each as tokens."""
    lexer = shlex.shlex(run, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in ("&&", "||", ";", "|"):
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def pip_installs(instructions: list[Instruction]) -> list[tuple[Instruction, list[str]]]:
    found = []
    for ins in instructions:
        if ins.op != "RUN":
            continue
        for cmd in shell_commands(ins.args):
            if "pip" in cmd and "install" in cmd:
                found.append((ins, cmd[cmd.index("install") + 1 :]))
    return found


def requirement_specs(tokens: list[str]) -> tuple[list[str], list[str], set[str]]:
    """(package specs, requirement/constraint files, flags) of one ``pip install``."""
    specs, files, flags = [], [], set()
    it = iter(tokens)
    for tok in it:
        if tok in PIP_OPTIONS_WITH_VALUE:
            value = next(it)
            flags.add(f"{tok}={value}")
            if tok in ("-r", "-c", "--constraint"):
                files.append(value)
        elif tok.startswith("-"):
            flags.add(tok)
        else:
            specs.append(tok)
    return specs, files, flags


def makefile_pins() -> dict[str, str]:
    text = (ROOT / "Makefile").read_text()
    return dict(re.findall(r"\b(torch|fbgemm-gpu-cpu|torchrec)==([\w.]+)", text))


@pytest.fixture(params=DOCKERFILES, ids=IDS)
def dockerfile(request) -> Path:
    return request.param


def test_all_images_are_here():
    assert IDS == ["cpu", "cuda", "mlflow"]


def test_base_images_are_pinned_by_tag(dockerfile):
    args, parsed = stages(parse(dockerfile))
    aliases: set[str] = set()
    for stage in parsed:
        words = substitute(stage[0].args, args).split()
        image = next(w for w in words if not w.startswith("--"))
        if "AS" in [w.upper() for w in words]:
            aliases.add(words[-1])
        if image in aliases:
            continue
        ref, _, digest = image.partition("@")
        repo, _, tag = ref.rpartition(":")
        assert repo and "/" not in tag, f"{dockerfile}:{stage[0].line}: {image} has no tag"
        assert tag != "latest" and re.search(r"\d+\.\d+", tag), f"{dockerfile}: {image} is not a version tag"
        assert not digest or re.fullmatch(r"sha256:[0-9a-f]{64}", digest), image


def test_no_add_and_no_remote_sources(dockerfile):
    for ins in parse(dockerfile):
        assert ins.op != "ADD", f"{dockerfile}:{ins.line}: use COPY (ADD fetches URLs and unpacks archives)"
        if ins.op == "RUN":
            assert not re.search(r"\b(curl|wget)\b[^|]*\|\s*(ba)?sh", ins.args), f"{ins.line}: piped script"


def test_runs_as_a_numeric_non_root_user_at_the_end(dockerfile):
    _, parsed = stages(parse(dockerfile))
    final = parsed[-1]
    users = [i for i, ins in enumerate(final) if ins.op == "USER"]
    assert users, f"{dockerfile}: no USER in the final stage (it would run as root)"
    last = users[-1]
    assert re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", final[last].args), (
        f"{dockerfile}: USER {final[last].args}: a numeric uid lets Kubernetes verify runAsNonRoot"
    )
    after = {ins.op for ins in final[last + 1 :]}
    assert after <= {"CMD", "ENTRYPOINT", "HEALTHCHECK", "EXPOSE", "LABEL", "STOPSIGNAL"}, after


def test_pip_installs_exact_versions_without_cache(dockerfile):
    installs = pip_installs(parse(dockerfile))
    assert installs
    for ins, tokens in installs:
        assert "--no-cache-dir" in tokens, f"{dockerfile}:{ins.line}: pip install without --no-cache-dir"
        specs, files, _ = requirement_specs(tokens)
        for spec in specs:
            assert spec == "." or EXACT_PIN.match(spec), (
                f"{dockerfile}:{ins.line}: {spec!r} is not name==version"
            )
        for f in files:
            assert f.startswith("/tmp/recpipe/"), f
    # Every requirements file an image installs pins exact versions.
    for rel in ("requirements/lock.txt", "images/mlflow/requirements.txt"):
        for line in (ROOT / rel).read_text().splitlines():
            line = line.split("#")[0].strip()
            assert not line or EXACT_PIN.match(line), f"{rel}: {line!r} is not name==version"


def test_apt_get_installs_without_recommends_and_removes_its_lists(dockerfile):
    for ins in parse(dockerfile):
        if ins.op != "RUN" or "apt-get" not in ins.args:
            continue
        cmds = shell_commands(ins.args)
        installs = [i for i, c in enumerate(cmds) if c[:2] == ["apt-get", "install"]]
        updates = [i for i, c in enumerate(cmds) if c[:2] == ["apt-get", "update"]]
        cleanups = [i for i, c in enumerate(cmds) if c[:2] == ["rm", "-rf"] and "/var/lib/apt/lists/*" in c]
        assert not any("upgrade" in c for c in cmds), f"{dockerfile}:{ins.line}: apt-get upgrade"
        for i in installs:
            assert {"-y", "--no-install-recommends"} <= set(cmds[i]), f"{dockerfile}:{ins.line}: {cmds[i]}"
            assert updates and updates[0] < i, f"{dockerfile}:{ins.line}: update in the same RUN, first"
            assert cleanups and cleanups[-1] > i, f"{dockerfile}:{ins.line}: rm -rf /var/lib/apt/lists/*"


def test_lock_is_copied_and_installed_before_the_source(dockerfile):
    ins = parse(dockerfile)
    lock_copy = next(i for i, x in enumerate(ins) if x.op == "COPY" and "requirements/lock.txt" in x.args)
    lock_install = next(i for i, x in enumerate(ins) if x.op == "RUN" and "/tmp/recpipe/lock.txt" in x.args)
    sources = [
        i
        for i, x in enumerate(ins)
        if x.op == "COPY" and re.match(r"(recpipe|images/mlflow/\w+\.py)", x.args)
    ]
    assert sources and lock_copy < lock_install < min(sources), (lock_copy, lock_install, sources)


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_recpipe_images_hold_the_projects_pins(kind):
    pins = makefile_pins()
    assert pins == {
        "torch": pins["torch"],
        "fbgemm-gpu-cpu": pins["fbgemm-gpu-cpu"],
        "torchrec": pins["torchrec"],
    }
    installs = [requirement_specs(t) for _, t in pip_installs(parse(IMAGES / kind / "Dockerfile"))]
    by_spec: dict[str, tuple[str, set[str]]] = {}
    for specs, _, flags in installs:
        for spec in specs:
            if spec != ".":  # the first install of a package is the one that chooses its build
                by_spec.setdefault(spec.split("==")[0], (spec.split("==")[1], flags))
    torch_version, torch_flags = by_spec["torch"]
    assert torch_version == pins["torch"]
    assert by_spec["torchrec"][0] == pins["torchrec"] and "--no-deps" in by_spec["torchrec"][1]
    if kind == "cpu":
        assert "--index-url=https://download.pytorch.org/whl/cpu" in torch_flags
        assert (
            by_spec["fbgemm-gpu-cpu"][0] == pins["fbgemm-gpu-cpu"]
            and "--no-deps" in by_spec["fbgemm-gpu-cpu"][1]
        )
        assert "fbgemm-gpu" not in by_spec and "torch-tensorrt" not in by_spec
    else:
        assert any(
            re.fullmatch(r"--index-url=https://download\.pytorch\.org/whl/\$\{TORCH_CUDA\}", f)
            for f in torch_flags
        )
        assert by_spec["fbgemm-gpu"][0] == pins["fbgemm-gpu-cpu"] and "--no-deps" in by_spec["fbgemm-gpu"][1]
        assert "fbgemm-gpu-cpu" not in by_spec
        # torch_tensorrt's minor follows torch's.
        assert by_spec["torch-tensorrt"][0].rsplit(".", 1)[0] == torch_version.rsplit(".", 1)[0]
        text = (IMAGES / kind / "Dockerfile").read_text()
        assert re.search(r"ARG TORCH_CUDA=cu\d+", text) and "FROM nvidia/cuda:" in text
    # The lock must not carry torch: it would replace the build chosen above.
    lock = (ROOT / "requirements" / "lock.txt").read_text()
    assert not re.search(r"^(torch|fbgemm-gpu(-cpu)?|torchrec)==", lock, re.M)


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
def test_recpipe_images_hold_the_code_where_configs_resolve(kind):
    ins = parse(IMAGES / kind / "Dockerfile")
    workdir = next(x.args for x in ins if x.op == "WORKDIR")
    copies = {x.args.split()[0]: x.args.split()[-1] for x in ins if x.op == "COPY" and "--from" not in x.args}
    for package in ("recpipe/", "components/", "pipelines/", "configs/"):
        assert copies.get(package) == package, f"{kind}: COPY {package} {package} (relative to WORKDIR)"
    # The pipeline's default config path resolves in the image's working directory.
    from pipelines.training_pipeline import training_pipeline

    default_config = training_pipeline.component_spec.inputs["config"].default
    assert default_config == "configs/din_taobao.yaml" and (ROOT / default_config).is_file()
    assert workdir == "/opt/recpipe"


def test_labels_and_healthchecks(dockerfile):
    ins = parse(dockerfile)
    labels = " ".join(x.args for x in ins if x.op == "LABEL")
    for key in ("title", "description", "version", "source", "licenses"):
        assert f"org.opencontainers.image.{key}=" in labels, f"{dockerfile}: label {key}"
    (health,) = [x.args for x in ins if x.op == "HEALTHCHECK"]
    if dockerfile.parent.name == "mlflow":
        assert "/health" in health  # a server: probe it
    else:
        assert health == "NONE"  # batch steps: their exit status is the health


def test_mlflow_image_serves_with_the_locks_mlflow():
    lock = dict(re.findall(r"^([\w.-]+)==(\S+)$", (ROOT / "requirements" / "lock.txt").read_text(), re.M))
    reqs = dict(re.findall(r"^([\w.-]+)==(\S+)$", (IMAGES / "mlflow" / "requirements.txt").read_text(), re.M))
    assert reqs["mlflow"] == lock["mlflow"], "server and clients must run the same MLflow"
    assert {"Flask-WTF", "psycopg2-binary", "boto3"} <= set(reqs)
    ins = parse(IMAGES / "mlflow" / "Dockerfile")
    (entrypoint,) = [x.args for x in ins if x.op == "ENTRYPOINT"]
    assert entrypoint == '["python", "-m", "recpipe_mlflow_server"]'


# ---- Build context -------------------------------------------------------------------------------------


def ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics, enough for these files: last matching pattern wins, ``!`` re-includes, a
    pattern that matches a folder matches everything under it."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        if any(
            fnmatch.fnmatchcase(c, pat) or fnmatch.fnmatchcase(c, pat.replace("**/", "")) for c in candidates
        ):
            result = not negate
    return result


def test_build_context_holds_what_each_image_copies_and_nothing_else(dockerfile):
    ignore_file = dockerfile.with_name("Dockerfile.dockerignore")
    assert ignore_file.is_file(), f"{ignore_file} keeps .venv, runs and .git out of the build context"
    patterns = [
        ln.strip() for ln in ignore_file.read_text().splitlines() if ln.strip() and not ln.startswith("#")
    ]
    for ins in parse(dockerfile):
        if ins.op != "COPY" or "--from" in ins.args:
            continue
        for src in ins.args.split()[:-1]:
            top = ROOT / src
            assert top.exists(), f"{dockerfile}: COPY {src}: no such path"
            files = [top] if top.is_file() else [Path(d) / f for d, _, fs in os.walk(top) for f in fs]
            for f in files:
                rel = f.relative_to(ROOT).as_posix()
                if "__pycache__" in rel:
                    continue
                assert not ignored(rel, patterns), f"{ignore_file.name} excludes {rel}, which is copied"
    for outside in (
        ".venv/bin/python",
        ".git/HEAD",
        "runs/data/x.parquet",
        "tests/test_config.py",
        "benchmarks",
    ):
        assert ignored(outside, patterns), f"{ignore_file} lets {outside} into the context"
    assert ignored("recpipe/__pycache__/cli.cpython-311.pyc", patterns)
