"""TorchEasyRec's DeepFM / WideAndDeep configs (``deepfm_criteo.config``'s constructs: FG_NONE, WIDE groups,
``deepfm``) import; pre-encoded ids are range-checked against the imported tables."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from tzrec_fixtures import TERABYTE_BUCKETS, small_din, tzrec_deepfm

from recpipe.data.synthetic import generate
from recpipe.features.build import build_feature_spec
from recpipe.features.fg import BadRowError, FeatureGenerator
from recpipe.train.memory import GIB, DeviceMemory, OversizeError, check_fits, embedding_memory_report
from recpipe.tzrec import TzrecImportError, import_tzrec

SPARSE = " ".join(f'feature_names: "cat_{i}"' for i in range(26))


def test_deepfm_criteo_imports_as_pre_encoded_input_with_wide_fm_and_deep_groups():
    """FG_NONE (docs/source/feature/data.md): columns are named after the features and hold FG's output, so
    no ``expression`` is needed and none is read; DeepFM reads groups ``wide``, ``deep`` and ``fm``
    (tzrec/models/deepfm.py), the WIDE group's tables being each feature's ``<emb_name>_wide``."""
    imported = import_tzrec(tzrec_deepfm())
    cfg = imported.config
    assert cfg.data.fg_encoded is True and cfg.data.params == {"PROJECT": None}
    assert all(f.column is None for f in cfg.features)  # read by name
    assert [(g.name, g.type) for g in cfg.feature_groups] == [
        ("wide", "wide"),
        ("fm", "deep"),
        ("deep", "deep"),
    ]
    m = cfg.model
    assert (m.type, m.wide_group, m.deep_group, m.fm_group) == ("deepfm", "wide", "deep", "fm")
    assert m.deep.hidden_units == [512, 256, 128] and m.final.hidden_units == [64]
    assert imported.summary == "TorchEasyRec fields: 206 mapped, 2 ignored (notes say why), 0 refused"
    spec = build_feature_spec(cfg)
    assert spec.feature("cat_5").mapping.kind == "identity" and spec.feature("cat_5").mapping.size == 3
    tables = {t.name: t for t in spec.tables()}
    assert (tables["cat_0_wide"].num_embeddings, tables["cat_0_wide"].embedding_dim) == (40_000_000, 4)


def test_without_an_fm_group_deepfm_takes_fm_over_the_deep_group():
    """TorchEasyRec: ``group_dims("fm")`` when the config has group ``fm``, else ``group_dims("deep")``."""
    groups = (
        f'feature_groups {{ group_name: "wide" {SPARSE} group_type: WIDE }}\n'
        f'feature_groups {{ group_name: "deep" {SPARSE} group_type: DEEP }}'
    )
    cfg = import_tzrec(tzrec_deepfm(groups=groups)).config
    assert cfg.model.fm_group == "deep" and cfg.model.final.hidden_units == [64]


def test_wide_and_deep_imports_with_its_wide_embedding_dim():
    """``wide_embedding_dim`` (default 4) sizes every WIDE group's tables; no ``final`` means the logits are
    added (tzrec/models/wide_and_deep.py)."""
    groups = (
        f'feature_groups {{ group_name: "wide" {SPARSE} group_type: WIDE }}\n'
        f'feature_groups {{ group_name: "deep" feature_names: "int_0" {SPARSE} group_type: DEEP }}'
    )
    model = "wide_and_deep { deep { hidden_units: [64, 32] } wide_embedding_dim: 8 }"
    cfg = import_tzrec(tzrec_deepfm(groups=groups, model=model)).config
    assert cfg.model.type == "wide_and_deep" and cfg.model.final is None
    assert cfg.feature_groups[0].embedding_dim == 8
    spec = build_feature_spec(cfg)
    assert {t.embedding_dim for t in spec.tables() if t.name.endswith("_wide")} == {8}


def test_groups_deepfm_needs_and_wide_init_fn_are_problems():
    """The group ``wide`` must be a WIDE group (only those get the per-feature wide tables), ``deep`` must
    exist; ``wide_init_fn`` (a torch init expression) is not read."""
    groups = (
        f'feature_groups {{ group_name: "wide" {SPARSE} group_type: DEEP }}\n'
        f'feature_groups {{ group_name: "dnn" {SPARSE} group_type: DEEP }}'
    )
    model = 'deepfm { deep { hidden_units: [8] } wide_init_fn: "nn.init.zeros_" }'
    with pytest.raises(TzrecImportError) as err:
        import_tzrec(tzrec_deepfm(groups=groups, model=model))
    messages = [p.message for p in err.value.problems]
    assert "deepfm reads a feature group 'wide' of group_type WIDE; it is DEEP" in messages
    assert "deepfm reads a feature group 'deep' of group_type DEEP; there is none" in messages
    assert any("unsupported field 'wide_init_fn'" in m for m in messages)


def test_the_deprecated_fg_encoded_wins_over_fg_mode_as_in_torcheasyrec():
    """``_get_compatible_fg_mode`` (tzrec/utils/config_util.py): a set ``fg_encoded`` decides (true: FG_NONE;
    false: FG_DAG when ``fg_threads`` > 0, its default 1); only without it does ``fg_mode`` count."""
    din = small_din()
    assert import_tzrec(din).config.data.fg_encoded is False
    encoded = din.replace("fg_mode: FG_DAG", "fg_mode: FG_DAG fg_encoded: true")
    assert import_tzrec(encoded).config.data.fg_encoded is True
    raw = din.replace("fg_mode: FG_DAG", "fg_mode: FG_NONE fg_encoded: false")
    assert import_tzrec(raw).config.data.fg_encoded is False


def test_fg_encoded_default_value_fills_nulls_of_encoded_columns_only():
    """feature.md: ``fg_encoded_default_value`` fills FG_NONE input's nulls; ``default_value`` is applied
    by FG before bucketizing, so FG_NONE input already holds it (a note)."""
    text = tzrec_deepfm().replace(
        'feature_name: "cat_1" num_buckets: 39060',
        'feature_name: "cat_1" default_value: "x" fg_encoded_default_value: "7" num_buckets: 39060',
    )
    text = text.replace('feature_name: "int_3" }', 'feature_name: "int_3" fg_encoded_default_value: "-1" }')
    imported = import_tzrec(text)
    features = {f.name: f for f in imported.config.features}
    assert features["cat_1"].default_value == "7" and features["int_3"].default == -1.0
    notes = {n.path: n.message for n in imported.notes}
    assert notes["feature_configs[14].id_feature.default_value"].startswith("ignored: FG_NONE input already")


def test_an_id_beyond_the_imported_table_is_a_bad_row_naming_file_row_and_column(tmp_path):
    """Pre-encoded ids are rows; TorchEasyRec would look them up unchecked. With tables capped at 1,000 rows,
    generated ids of the 100k-value columns fall outside and FG names the first such row."""
    spec = build_feature_spec(import_tzrec(tzrec_deepfm(max_buckets=1000)).config)
    files = generate("criteo", 300, tmp_path, seed=3, hashed=1).files
    table = pq.read_table(files[0])
    with pytest.raises(
        BadRowError,
        match=r"part-00000.parquet, row \d+, column 'cat_\d+': expected a pre-encoded id in \[0, 1000\)",
    ):
        FeatureGenerator(spec)(table, file="part-00000.parquet")
    assert max(TERABYTE_BUCKETS) > 1000  # the shipped sizes hold every generated id (the end-to-end test)


def test_deepfm_criteo_full_size_counts_its_wide_tables_and_is_refused_on_a_16_gib_device():
    """The shipped sizes: 204M rows of dim 16 plus the same rows of dim 4 in the wide tables, with Adagrad."""
    cfg = import_tzrec(tzrec_deepfm()).config
    report = embedding_memory_report(build_feature_spec(cfg), cfg.train.sparse_optimizer.type)
    assert report.total_rows == 2 * 204_184_588 and round(report.total_bytes / GIB, 1) == 30.4
    with pytest.raises(OversizeError, match=r"need 30.4 GiB but the planned devices hold 16.0 GiB"):
        check_fits(report, DeviceMemory(16 * GIB, 1, "1 GPU(s) × 16.0 GiB HBM (test)"))
