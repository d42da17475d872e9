"""CPU and wall time of a GSS-EP fit with one and two BLAS threads (threadpoolctl), twice each in one process.

Run it on an idle machine and again beside another busy process (for example
``python -c "while True: pass" &``) to see what more threads cost on a shared machine. Never asserts on time.
``blas_threads=None`` lets the fit use the limit set around it.
"""

import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.models import GroupSpikeSlabEP

warnings.simplefilter("ignore")
rng = np.random.default_rng(0)
for n, d in [(64, 512), (288, 784), (512, 4096)]:
    groups = np.repeat(np.arange(d // 4), 4)
    X = rng.normal(size=(n, d)); w = np.where(groups < d // 32, rng.normal(size=d), 0.0); y = X @ w + rng.normal(size=n)
    out = []
    for threads in (1, 2, 1, 2):
        with threadpool_limits(threads):
            est = GroupSpikeSlabEP(groups, p0=1 / 8, v0=1.0, noise_var=1.0, max_iter=30, tol=1e-12, blas_threads=None)
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(3 if n < 512 else 1):
                est.fit(X, y)
            out.append((threads, time.process_time() - c0, time.perf_counter() - t0))
    print(n, d, " | ".join(f"{t} thr cpu {c:.2f} wall {w:.2f}" for t, c, w in out), flush=True)
