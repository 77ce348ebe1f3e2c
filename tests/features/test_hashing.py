import numpy as np
import pyarrow as pa

from recpipe.features.hashing import fnv1a64, fnv1a64_py


def test_known_vectors():
    # Published FNV-1a 64 test vectors.
    assert fnv1a64_py("") == 0xCBF29CE484222325
    assert fnv1a64_py("a") == 0xAF63DC4C8601EC8C
    assert fnv1a64_py("foobar") == 0x85944171F73967E8


def test_vectorized_equals_reference_on_mixed_lengths_nulls_and_unicode():
    rng = np.random.default_rng(0)
    words = ["", "a", "430548_1007", "价格", "x" * 300] + [str(rng.integers(0, 10**12)) for _ in range(200)]
    arr = pa.array(words + [None])
    got = fnv1a64(arr)
    want = [fnv1a64_py(w) for w in words] + [fnv1a64_py("")]
    assert got.tolist() == want
    # Slices (non-zero array offset) and large_string behave the same.
    assert fnv1a64(arr.slice(3, 10)).tolist() == want[3:13]
    assert fnv1a64(arr.cast(pa.large_string())).tolist() == want
