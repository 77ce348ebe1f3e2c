"""One user × N candidates from a trained DIN's held-out rows: the user's columns as a request's context, the
items' as its rows, and the equivalent full rows (tests/export/test_scorer.py, tests/export/test_aoti.py)."""

from __future__ import annotations

import json

import pyarrow as pa

# One user × N candidates: the DIN's user side (profile and history) sent once as the context.
USER_COLUMNS = ["user_id", "cms_segid", "cms_group_id", "final_gender_code", "age_level", "pvalue_level",
                "shopping_level", "occupation", "new_user_class_level", "click_50_seq"]  # fmt: skip


def one_user(trained, n: int) -> tuple[dict, pa.Table, pa.Table]:
    """(context, candidate rows, the equivalent full rows): the user of the first held-out row with a history of
    two items or more × ``n`` items."""
    rows = trained.held_out.slice(0, n)
    rows = rows.drop_columns([c for c in rows.column_names if c in trained.spec.labels])
    user = [c for c in USER_COLUMNS if c in rows.column_names]
    users = rows.select(user).to_pylist()
    first = next(u for u in users if "|" in (u["click_50_seq"] or ""))
    context = json.loads(json.dumps(first))  # what a JSON client sends
    candidates = rows.drop_columns(user)
    full = candidates
    for c in user:
        full = full.append_column(c, pa.array([context[c]] * n, rows.schema.field(c).type))
    return context, candidates, full
