"""FG + to_batch throughput on the Taobao config (batch 8192): vectorized vs per-row reference.

Both run in this process on the same generated rows, pinned to one thread (pyarrow, torch, BLAS), timed
by CPU time of this process (``time.process_time``), so other load on the machine does not distort it.
Last line: ``fg_throughput: rows_per_s=<N> speedup_vs_rowwise=<X>``; JSON in benchmarks/results/.
``--quick``: 4,096 rows in batches of 1,024, one batch for the per-row reference, 2 repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import torch  # noqa: E402
from _common import parse_args, quick_out  # noqa: E402

from recpipe.batch import to_batch  # noqa: E402
from recpipe.config import load_config  # noqa: E402
from recpipe.data.synthetic import generate  # noqa: E402
from recpipe.features.build import build_feature_spec  # noqa: E402
from recpipe.features.fg import FeatureGenerator  # noqa: E402

# The per-row reference is a test oracle (tests/features/rowwise.py), not library code: its folder goes on
# the import path here, as pytest puts it there for the tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "features"))
from rowwise import rowwise_fg  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=262_144, help="rows for the vectorized path")
    ap.add_argument("--rowwise-rows", type=int, default=16_384, help="rows for the per-row reference")
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS / "fg_throughput.json", help="the JSON results file")
    quick = {"rows": 4096, "rowwise_rows": 1024, "batch_size": 1024, "repeats": 2}
    args = parse_args(ap, {**quick, "out": quick_out("fg_throughput.json")})
    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    torch.set_num_threads(1)
    spec = build_feature_spec(load_config("configs/din_taobao.yaml"))
    keys = spec.sparse_keys()
    with tempfile.TemporaryDirectory() as tmp:
        generate("taobao", rows=args.rows, out=tmp, seed=0)
        table = pq.read_table(tmp, columns=spec.input_columns())
    batches = [
        table.slice(i, args.batch_size).combine_chunks().to_batches()[0]
        for i in range(0, table.num_rows, args.batch_size)
    ]
    hist = table.column("click_50_seq").to_pylist()
    mean_hist = sum(0 if not h else h.count("|") + 1 for h in hist) / len(hist)

    def vectorized() -> float:
        fg = FeatureGenerator(spec)
        t0 = time.process_time()
        for b in batches:
            to_batch(fg(b), keys)
        return time.process_time() - t0

    rw_batches = batches[: max(1, args.rowwise_rows // args.batch_size)]
    rw_rows = sum(b.num_rows for b in rw_batches)

    def rowwise() -> float:
        t0 = time.process_time()
        for b in rw_batches:
            out, _ = rowwise_fg(spec, b)
            to_batch(out, keys)
        return time.process_time() - t0

    vec_times, rw_times = [], []
    for _ in range(args.repeats):  # interleaved so both see the same machine state
        vec_times.append(vectorized())
        rw_times.append(rowwise())
    vec_rps = table.num_rows / min(vec_times)
    rw_rps = rw_rows / min(rw_times)
    result = {
        "rows": table.num_rows,
        "rowwise_rows": rw_rows,
        "batch_size": args.batch_size,
        "mean_history_length": round(mean_hist, 3),
        "vectorized_rows_per_s": round(vec_rps),
        "rowwise_rows_per_s": round(rw_rps),
        "speedup_vs_rowwise": round(vec_rps / rw_rps, 2),
        "threads": 1,
        "clock": "process_time",
        "machine": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "pyarrow": pa.__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    print(
        f"fg_throughput: rows_per_s={result['vectorized_rows_per_s']} speedup_vs_rowwise={result['speedup_vs_rowwise']}"
    )


if __name__ == "__main__":
    main()
