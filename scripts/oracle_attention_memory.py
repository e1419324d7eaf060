"""Peak memory of the oracle's attention at B=1, H=8, N=8192, D=64 (SPEC.md §3.1).

The oracle computes attention in query chunks, so memory grows linearly in N; the full
8192 x 8192 x 8 float64 score tensor alone would be 4 GiB.
Run: python scripts/oracle_attention_memory.py
"""

import resource
import time

import numpy as np

from tck.reference import oracle

B, H, N, D = 1, 8, 8192, 64


def main() -> None:
    r = np.random.default_rng(0)
    q, k, v = (r.standard_normal((B, H, N, D)) for _ in range(3))
    keep = oracle.key_padding(oracle.padding_keep_mask([N - 192], N))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    oracle.scaled_dot_product_attention(q, k, v, keep)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # ru_maxrss is KiB on Linux
    print(
        f"B={B} H={H} N={N} D={D}: {seconds:.1f} s, peak RSS {peak:.0f} MiB "
        f"(process before the call: {before:.0f} MiB; full score tensor would be "
        f"{B * H * N * N * 8 / 2**20:.0f} MiB)"
    )


if __name__ == "__main__":
    main()
