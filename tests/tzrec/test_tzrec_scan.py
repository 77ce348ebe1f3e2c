"""The pre-pass lists every unsupported field with its line, whatever its value looks like."""

from recpipe.tzrec.scan import scan
from recpipe.tzrec.schema import descriptor

TEXT = """\
model_dir: "m"
data_config {
    label_fields: ["clk", "buy"]
    shuffle: true
    input_fields: [{ input_name: "a" }, { input_name: "b", input_type: INT64 }]
}
export_config {
    exporter_type: "final"
    nested { deeper < x: 1 > list: [1, 2] }
}
feature_configs {
    id_feature {
        feature_name: "f"  # a comment
        vocab_dict: [{key: "a" value: 2}, {key: "b" value: 3}]
        fg_value_type: "x" "y"
        embedding_dim: 4
    }
}
feature_configs: { raw_feature: { feature_name: "g"; normalizer: "log(x+3)" } }
[some.extension] { a: 1 }
"""


def test_every_unsupported_field_is_listed_with_its_line():
    found = scan(TEXT, descriptor())
    problems = found.unknown
    assert found.syntax_error is None
    assert [(p.line, p.path) for p in problems] == [
        (4, "data_config.shuffle"),
        (7, "export_config"),
        (14, "feature_configs[0].id_feature.vocab_dict"),
        (15, "feature_configs[0].id_feature.fg_value_type"),
        (20, "[some.extension]"),
    ]
    assert "'shuffle'" in problems[0].message and "label_fields" in problems[0].message


def test_lines_of_known_fields_and_repeated_elements():
    lines = scan(TEXT, descriptor()).lines
    assert lines["model_dir"] == 1
    assert lines["data_config.label_fields"] == 3 and lines["data_config.label_fields[1]"] == 3
    assert lines["data_config.input_fields[1]"] == 5
    assert lines["data_config.input_fields[1].input_type"] == 5
    assert lines["feature_configs[0].id_feature.embedding_dim"] == 16
    assert lines["feature_configs[1].raw_feature.normalizer"] == 19


def test_a_syntax_error_ends_the_scan_with_its_line():
    found = scan('model_dir: "m"\nshuffle: 1\ndata_config {\n  batch_size: 3\n', descriptor())
    assert [(p.line, p.path) for p in found.unknown] == [(2, "shuffle")]
    assert found.syntax_error is not None and found.syntax_error.line == 5
    assert found.syntax_error.message == 'syntax error: Expected "}".'
