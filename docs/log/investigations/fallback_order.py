"""Which order of the fallback's stages reaches EP's fixed point most often, on small problems whose damped
parallel run stops short of it (simulated; docs/log/mri.md, "Anderson acceleration reaches the columns that
circle", and the seventh session's entry).

Problems as tests/test_ep_anderson.py draws them from a seed (10 groups of 3, 3 on; 8-19 rows; noise variance 1e-4,
1e-3 or 1e-2; p0 0.1 or 0.3); kept are those whose parallel run (the paper's decaying damping, no fallback, tol
1e-6) ends not converged. From its end every variant runs at the same hyper-parameters, and a point counts only if
the library's strict test passed (one undamped update changes the fit by less than tol). Prints the count per
variant and the median / largest CPU seconds (one BLAS thread).

Run: ``OPENBLAS_NUM_THREADS=1 python docs/log/investigations/fallback_order.py --seeds 400``
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

import adaptcs.models._ep as ep
from adaptcs.models._ep_anderson import anderson_ep
from adaptcs.models._ep_decoupled import decoupled_ep
from adaptcs.models._ep_fallback import stable_ep

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from test_ep_anderson import _problem  # noqa: E402

TOL = 1e-6


def decoupled_then_anderson(problem, hyper, sites):
    run = decoupled_ep(problem, hyper, sites, tol=TOL)
    return run if run.converged else anderson_ep(problem, hyper, run.sites, tol=TOL)


def decoupled_then_anderson_twice(problem, hyper, sites):
    """The above, then Anderson again from the start where it failed from the decoupled loop's end."""
    run = decoupled_then_anderson(problem, hyper, sites)
    return run if run.converged else anderson_ep(problem, hyper, sites, tol=TOL)


VARIANTS = {
    "decoupled": lambda p, h, s: decoupled_ep(p, h, s, tol=TOL),
    "anderson": lambda p, h, s: anderson_ep(p, h, s, tol=TOL),
    "decoupled, anderson": decoupled_then_anderson,
    "decoupled, anderson, anderson from the start": decoupled_then_anderson_twice,
    "anderson 300 updates": lambda p, h, s: anderson_ep(p, h, s, tol=TOL, max_iter=300),
    "anderson memory 20": lambda p, h, s: anderson_ep(p, h, s, tol=TOL, memory=20),
    "shipped (stable_ep)": lambda p, h, s: stable_ep(p, h, s, tol=TOL),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=400)
    args = parser.parse_args()
    reached = {name: 0 for name in VARIANTS}
    cpu = {name: [] for name in VARIANTS}
    hard = 0
    for seed in range(args.seeds):
        problem, hyper, prior = _problem(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            parallel = ep.run_ep(problem, hyper, prior, tol=TOL, max_iter=5000)
        if parallel.converged or parallel.failure is not None:
            continue
        hard += 1
        line = [f"seed {seed:4d} n={problem.n:2d}"]
        for name, variant in VARIANTS.items():
            start = time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run = variant(problem, hyper, parallel.sites.copy())
            cpu[name].append(time.process_time() - start)
            reached[name] += bool(run.converged)
            line.append(f"{name}: {'yes' if run.converged else 'no '}")
        print("  ".join(line), flush=True)
    print(f"\n{hard} of {args.seeds} problems whose parallel run stops short")
    for name in VARIANTS:
        print(f"{name:46s} reached {reached[name]:3d}   CPU s median {np.median(cpu[name]):.2f}, "
              f"largest {np.max(cpu[name]):.2f}")


if __name__ == "__main__":
    main()
