"""`make images` (scripts/build_images.sh): the tags are the components' image constants, and without a
container engine (and no way to install podman) it says so and fails instead of pretending. The built
images themselves: tests/images/test_built_images.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import recpipe
from components.image import CUDA_IMAGE, IMAGE

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_images.sh"


def test_tags_are_the_components_image_constants():
    out = subprocess.run(
        ["bash", str(SCRIPT), "--print-tags"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [IMAGE, CUDA_IMAGE, f"ghcr.io/recpipe/recpipe-mlflow:{recpipe.__version__}"]


def test_make_images_without_an_engine_fails_with_a_clear_message(tmp_path):
    # A machine with neither docker nor podman, and no apt-get to install podman with: only the tools the
    # script needs before it looks for an engine are on PATH.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "dirname", "id", "cat"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    out = subprocess.run(
        ["bash", str(SCRIPT)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
    )
    assert out.returncode != 0
    assert "container engine: none usable" in out.stderr, out.stderr
    assert "docker: not found" in out.stderr and "podman: not found" in out.stderr, out.stderr


def test_scripts_parse_and_make_has_the_targets():
    for script in ("build_images.sh", "local_run.sh", "container_test.sh"):
        assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)]).returncode == 0, script
        assert (ROOT / "scripts" / script).stat().st_mode & 0o111, f"{script} is not executable"
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "container_engine.sh")]).returncode == 0
    dry = subprocess.run(
        ["make", "-n", "images", "run-containers", "container-test", "local-run", "local-down"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert dry.returncode == 0, dry.stderr
    for line in (
        "scripts/build_images.sh",
        "recpipe run --runner containers --runs runs/containers",
        "scripts/container_test.sh",
        "scripts/local_run.sh up",
        "scripts/local_run.sh down",
    ):
        assert line in dry.stdout, dry.stdout
