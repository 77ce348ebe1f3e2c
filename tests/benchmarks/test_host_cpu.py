"""benchmarks/_common.py's ``host_cpu``: every results file names the processor it was measured on (model and the
instruction sets GEMM rates depend on), read from ``/proc/cpuinfo`` as Linux writes it."""

from __future__ import annotations

import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _common import CPU_ISA, environment, host_cpu  # noqa: E402

# Two processors as /proc/cpuinfo lists them (trimmed): a blank line between blocks, tab-padded keys, and a
# second block whose model differs so that reading past the first block would show.
CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512dq avx512_bf16 avx512_vnni
power management:

processor\t: 1
model name\t: something else
flags\t\t: fpu amx_tile amx_bf16
"""


def test_the_first_processors_model_and_instruction_sets_in_a_fixed_order():
    assert host_cpu(CPUINFO) == {
        "model": "AMD EPYC 9R14",
        "isa": ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"],
    }


def test_amx_is_named_where_the_cpu_has_it():
    text = "model name\t: Intel(R) Xeon(R) Platinum 8488C\nflags\t\t: avx2 avx512f amx_bf16 amx_tile\n"
    assert host_cpu(text)["isa"] == ["avx2", "avx512f", "amx_tile", "amx_bf16"]
    assert set(CPU_ISA) >= {"avx512_bf16", "amx_tile"}


def test_without_cpuinfo_the_platforms_name_stands_in():
    assert host_cpu("") == {"model": platform.processor() or platform.machine(), "isa": []}


def test_the_shared_environment_block_carries_it():
    block = environment(time.perf_counter(), (0.0, 0.0, 0.0))
    assert block["cpu"] == host_cpu() and block["cpu"]["model"]
