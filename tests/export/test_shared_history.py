"""The RTP export's shared-history program (``dense_shared.pt2``): written for the DIN, listed and sealed in the
manifest, checked at export against the tiled program; the scorer takes it for a context holding the history
(the history looked up once) and the tiled program otherwise; the context form scores as the full rows through
the scorer and the pyfunc; a folder from before it (no ``dense_shared.pt2``) loads and serves the tiled way; a
model without DIN towers gets none. Its bf16 form (``dense_shared_bf16.pt2``): sealed, its parity recorded, scored
as the full rows within the tolerance, and taken only where that parity passed on a CPU with bf16 units. The scoring
server's context form: tests/export/test_server.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from one_user import one_user

from recpipe.export import shared as shared_module
from recpipe.export.loaders import load_backend
from recpipe.export.manifest import ArtifactError, Manifest, read_manifest, record_files
from recpipe.export.shared import BF16_ENV, BF16_PROGRAM, SHARED_PROGRAM, SharedHistory, bf16_usable
from recpipe.integrity import sha256_file


class Calls:
    """Counts the calls of a loaded program (the shared one: was it used?)."""

    def __init__(self, program) -> None:
        self.program, self.calls, self.batches = program, 0, []

    def __call__(self, *inputs):
        self.calls += 1
        self.batches.append(tuple(inputs[0].shape))
        return self.program(*inputs)


def _spied(folder: Path):
    scorer = load_backend(folder)
    spy = Calls(scorer.shared_history.program)
    scorer.shared_history.program = spy
    return scorer, spy


def _tolerance(trained) -> float:
    return trained.cfg.export.max_abs_logit_diff


def test_the_din_export_seals_a_shared_program_checked_against_the_tiled_one(din_export):
    trained, result = din_export
    folder = Path(result.backends["rtp"].folder)
    manifest = read_manifest(folder)
    assert (folder / SHARED_PROGRAM).is_file()
    assert manifest.files[SHARED_PROGRAM]["sha256"] == sha256_file(folder / SHARED_PROGRAM)
    assert manifest.extra["shared_history_program"] == SHARED_PROGRAM
    assert manifest.extra["shared_history_columns"] == ["click_50_seq"]
    parity = manifest.extra["shared_history_parity"]
    assert parity["passed"] and parity["max_abs_logit_diff"] <= _tolerance(trained)
    assert parity["candidates"] == 512 and parity["users"] == 6
    longest = max(s.max_length for s in trained.spec.sequences)
    assert {0, 1, longest} <= set(
        parity["history_lengths"]
    )  # the edge rows' empty, one-item and full histories
    assert parity["max_abs_logit_diff"] < 1e-5  # float32 rounding only
    names = [i["name"] for i in manifest.inputs["shared_dense_program"]]
    tiled = [i["name"] for i in manifest.inputs["dense_program"]]
    assert names == [n for n in tiled if not n.endswith("__offsets")] and "seq__values" in names
    values = next(i for i in manifest.inputs["shared_dense_program"] if i["name"] == "seq__values")
    assert values["shape"][0].startswith("T") and values["shape"][1] == 48


def test_a_context_with_the_history_is_scored_by_the_shared_program(din_export):
    trained, result = din_export
    scorer, spy = _spied(Path(result.out_dir) / "rtp")
    context, candidates, full = one_user(trained, 48)
    want = scorer.predict(full, output="logit")
    got = scorer.predict(candidates, output="logit", context=context)
    assert spy.calls == 1 and spy.batches == [(48, trained.spec.dense_dim)]  # once, for all 48 candidates
    np.testing.assert_allclose(got, want, rtol=0, atol=_tolerance(trained))
    assert (
        np.abs(got - want).max() < 1e-5
    )  # in practice rounding only (float32, or the bf16 program where taken)
    np.testing.assert_allclose(
        scorer.predict(candidates, context=context), scorer.predict(full), rtol=0, atol=_tolerance(trained)
    )
    assert len(set(np.round(got, 5))) > 1  # the candidates differ: not one score broadcast
    # The history alone as the context (the user's profile per row) is still one history: shared.
    rows = full.drop_columns(["click_50_seq"])
    history = {"click_50_seq": context["click_50_seq"]}
    np.testing.assert_allclose(
        scorer.predict(rows, "logit", context=json.dumps(history)), want, rtol=0, atol=_tolerance(trained)
    )
    assert spy.calls == 3
    # A context without the history (each candidate its own): the tiled program, the same scores.
    profile = {k: v for k, v in context.items() if k != "click_50_seq"}
    rows = candidates.append_column("click_50_seq", pa.array([context["click_50_seq"]] * 48))
    np.testing.assert_allclose(scorer.predict(rows, "logit", context=profile), want, rtol=0, atol=1e-6)
    assert spy.calls == 3


@pytest.mark.parametrize("history", ["", None])
def test_an_empty_or_missing_history_and_one_candidate_through_the_shared_program(din_export, history):
    trained, result = din_export
    scorer, spy = _spied(Path(result.out_dir) / "rtp")
    context, candidates, full = one_user(trained, 16)
    context = {**context, "click_50_seq": history}
    full = full.set_column(
        full.column_names.index("click_50_seq"), "click_50_seq", pa.array([history] * 16, pa.string())
    )
    want = scorer.predict(full, output="logit")
    got = scorer.predict(candidates, output="logit", context=context)
    np.testing.assert_allclose(got, want, rtol=0, atol=_tolerance(trained))
    one = scorer.predict(candidates.slice(3, 1), output="logit", context=context)
    np.testing.assert_allclose(one, want[3:4], rtol=0, atol=_tolerance(trained))
    assert spy.calls == 2 and spy.batches[1][0] == 1


def test_the_pyfunc_context_form_takes_the_shared_program(din_export):
    from recpipe.tracking.pyfunc import RawRowsModel

    trained, result = din_export
    model = RawRowsModel()
    model._scorer, spy = _spied(Path(result.out_dir) / "rtp")  # what load_context sets from the artifact
    context, candidates, full = one_user(trained, 32)
    want = model.predict(None, full.to_pandas())
    got = model.predict(None, candidates.to_pandas(), params={"context": json.dumps(context)})
    assert spy.calls == 1
    np.testing.assert_allclose(got, want, rtol=0, atol=_tolerance(trained))


def _as_old_export(src: Path, dst: Path) -> Path:
    """``src`` as an export from before the shared program: no file, no manifest entries, re-sealed."""
    shutil.copytree(src, dst)
    (dst / SHARED_PROGRAM).unlink()
    (dst / BF16_PROGRAM).unlink()
    manifest = read_manifest(dst, verify=False)
    manifest.extra = {k: v for k, v in manifest.extra.items() if not k.startswith("shared_history")}
    manifest.inputs = {k: v for k, v in manifest.inputs.items() if k != "shared_dense_program"}
    manifest.files = record_files(dst)
    manifest.write(dst)
    return dst


def test_an_export_without_the_shared_program_still_serves_the_context_form(din_export, tmp_path):
    trained, result = din_export
    old = _as_old_export(Path(result.backends["rtp"].folder), tmp_path / "rtp")
    scorer = load_backend(old)
    assert scorer.shared_history is None
    context, candidates, full = one_user(trained, 24)
    want = load_backend(Path(result.out_dir) / "rtp").predict(full, output="logit")
    np.testing.assert_allclose(scorer.predict(full, output="logit"), want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(scorer.predict(candidates, "logit", context=context), want, rtol=0, atol=1e-6)


def test_a_tampered_or_unlisted_shared_program_is_refused(din_export, tmp_path):
    _, result = din_export
    src = Path(result.backends["rtp"].folder)
    tampered = tmp_path / "tampered"
    shutil.copytree(src, tampered)
    with (tampered / SHARED_PROGRAM).open("ab") as f:
        f.write(b"\0")
    with pytest.raises(ArtifactError, match=SHARED_PROGRAM):
        load_backend(tampered)
    # A manifest naming the program without listing its file (hand-edited, or a writer's bug) is refused too.
    manifest = read_manifest(src)
    unlisted = Manifest(
        **{**manifest.to_dict(), "files": {k: v for k, v in manifest.files.items() if k != SHARED_PROGRAM}}
    )
    with pytest.raises(ArtifactError, match=f"names the shared-history program '{SHARED_PROGRAM}'"):
        SharedHistory.load(src, unlisted, load_backend(src).lookup, load_backend(src).spec)


def test_a_model_without_din_towers_has_no_shared_program(dlrm_export):
    _, result = dlrm_export
    folder = Path(result.backends["rtp"].folder)
    assert not (folder / SHARED_PROGRAM).exists()
    assert "shared_history_program" not in read_manifest(folder).extra
    assert load_backend(folder).shared_history is None


def test_the_din_export_seals_a_bf16_shared_program_and_records_its_parity(din_export):
    trained, result = din_export
    folder = Path(result.backends["rtp"].folder)
    manifest = read_manifest(folder)
    assert manifest.files[BF16_PROGRAM]["sha256"] == sha256_file(folder / BF16_PROGRAM)
    assert manifest.extra["shared_history_bf16_program"] == BF16_PROGRAM
    assert manifest.extra["shared_history_parity"]["precision"] == "float32"
    check = manifest.extra["shared_history_bf16_parity"]
    assert check["precision"] == "bfloat16" and check["tolerance"] == _tolerance(trained)
    assert check["users"] == 6 and check["candidates"] == 512
    assert check["passed"] == (check["max_abs_logit_diff"] <= _tolerance(trained))
    # bf16 rounds: its difference is reported, not the float32 program's again
    assert check["max_abs_logit_diff"] > manifest.extra["shared_history_parity"]["max_abs_logit_diff"]


def test_the_bf16_program_scores_the_context_form_as_the_full_rows(din_export):
    trained, result = din_export
    scorer = load_backend(Path(result.out_dir) / "rtp")
    shared = scorer.shared_history
    assert set(shared.programs) == {"float32", "bfloat16"}
    context, candidates, full = one_user(trained, 64)
    want = scorer.predict(full, output="logit")
    with shared.using("float32"):
        exact = scorer.predict(candidates, output="logit", context=context)
    with shared.using("bfloat16"):
        assert shared.precision == "bfloat16"
        got = scorer.predict(candidates, output="logit", context=context)
    assert shared.program is shared.programs[shared.precision]  # restored
    assert not np.array_equal(got, exact)  # the bf16 program ran
    # within the export's tolerance, as its parity check found over 6 users x 512 candidates
    assert read_manifest(Path(result.backends["rtp"].folder)).extra["shared_history_bf16_parity"]["passed"]
    np.testing.assert_allclose(got, want, rtol=0, atol=_tolerance(trained))


def test_the_scorer_takes_the_bf16_program_only_where_it_passed_on_bf16_hardware(din_export, monkeypatch):
    _, result = din_export
    folder = Path(result.backends["rtp"].folder)
    manifest = read_manifest(folder)

    def with_check(passed: bool | None) -> Manifest:
        extra = dict(manifest.extra)
        if passed is None:
            extra.pop("shared_history_bf16_parity")  # an export that wrote the program but did not check it
        else:
            extra["shared_history_bf16_parity"] = {**extra["shared_history_bf16_parity"], "passed": passed}
        return Manifest(**{**manifest.to_dict(), "extra": extra})

    monkeypatch.setattr(shared_module, "bf16_hardware", lambda: True)
    assert bf16_usable(with_check(True))
    assert not bf16_usable(with_check(False)) and not bf16_usable(with_check(None))
    monkeypatch.setenv(BF16_ENV, "0")
    assert not bf16_usable(with_check(True))
    monkeypatch.delenv(BF16_ENV)
    without = Manifest(
        **{**manifest.to_dict(), "extra": {k: v for k, v in manifest.extra.items() if "bf16" not in k}}
    )
    assert not bf16_usable(without)
    # The real folder: its recorded check decides on bf16 hardware; without bf16 units, float32 whatever it says.
    passed = manifest.extra["shared_history_bf16_parity"]["passed"]
    assert load_backend(folder).shared_history.precision == ("bfloat16" if passed else "float32")
    monkeypatch.setattr(shared_module, "bf16_hardware", lambda: False)
    shared = load_backend(folder).shared_history
    assert shared.precision == "float32" and shared.program is shared.programs["float32"]


def test_the_bf16_check_takes_its_own_tolerance(din_export):
    """``export.shared_history_bf16_max_abs_logit_diff`` (None: ``max_abs_logit_diff``) is what the bf16 program's
    parity is held to: at a tolerance below its rounding it fails, and the scorer keeps float32."""
    from recpipe.config.root import ExportConfig
    from recpipe.export.api import read_rows
    from recpipe.export.parity import build_parity_set
    from recpipe.export.shared import shared_history_parity

    trained, result = din_export
    assert trained.cfg.export.shared_history_bf16_max_abs_logit_diff is None
    assert (
        ExportConfig(shared_history_bf16_max_abs_logit_diff=1e-3).shared_history_bf16_max_abs_logit_diff
        == 1e-3
    )
    with pytest.raises(ValueError):
        ExportConfig(shared_history_bf16_max_abs_logit_diff=0.0)
    scorer = load_backend(Path(result.out_dir) / "rtp")
    parity = build_parity_set(
        read_rows(trained.held_out, trained.spec, csv=trained.cfg.csv_options()), trained.spec
    )
    recorded = read_manifest(Path(result.backends["rtp"].folder)).extra["shared_history_bf16_parity"]
    tight = recorded["max_abs_logit_diff"] / 2
    check = shared_history_parity(scorer, parity, tight, precision="bfloat16")
    assert check["precision"] == "bfloat16" and check["tolerance"] == tight and not check["passed"]
    assert check["max_abs_logit_diff"] == recorded["max_abs_logit_diff"]  # the same rows, the same program
    shared = scorer.shared_history
    assert shared.program is shared.programs[shared.precision]  # using() restored the scorer's own
    manifest = read_manifest(Path(result.backends["rtp"].folder))
    manifest.extra["shared_history_bf16_parity"] = check
    assert not bf16_usable(manifest)
