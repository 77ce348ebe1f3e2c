"""`make images` (scripts/build_images.sh): the tags are the components' image constants, and without a
Docker engine it says so and fails instead of pretending."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import recpipe
from components.image import CUDA_IMAGE, IMAGE

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_images.sh"


def _engine_reachable() -> bool:
    docker = shutil.which("docker")
    return bool(docker) and subprocess.run([docker, "info"], capture_output=True, timeout=30).returncode == 0


def test_tags_are_the_components_image_constants():
    out = subprocess.run(
        ["bash", str(SCRIPT), "--print-tags"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [IMAGE, CUDA_IMAGE, f"ghcr.io/recpipe/recpipe-mlflow:{recpipe.__version__}"]


@pytest.mark.skipif(_engine_reachable(), reason="a Docker engine is reachable: this would build the images")
def test_make_images_without_an_engine_fails_with_a_clear_message():
    # What `make images` runs (make itself would first bring .venv up to date).
    out = subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "make images:" in out.stderr and (
        "no Docker engine is reachable" in out.stderr or "docker not found" in out.stderr
    )


def test_scripts_parse_and_make_has_the_targets():
    for script in ("build_images.sh", "local_run.sh"):
        assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / script)]).returncode == 0, script
        assert (ROOT / "scripts" / script).stat().st_mode & 0o111, f"{script} is not executable"
    dry = subprocess.run(
        ["make", "-n", "images", "local-run", "local-down"], cwd=ROOT, capture_output=True, text=True
    )
    assert dry.returncode == 0, dry.stderr
    for line in ("scripts/build_images.sh", "scripts/local_run.sh up", "scripts/local_run.sh down"):
        assert line in dry.stdout, dry.stdout
