"""What keeps learned GSS-EP fits of E3 design loops from their joint fixed point (issue 47, learned values).

Runs E3 design loops with learned p0, v0 and noise variance (the workflow's learned variant, simulated signals) and
records every fit (``_ep_learning.infer``). Prints:

* the warm (tracked) refits: how many end not converged and the size of the EM-like step still left there;
* the fits that are read (the cold first fit and the strict fits the loop takes on to the test): which end not
  converged, and whether EP or the learning stopped short;
* for the first ``--examine`` tracked refits that end not converged: SQUAREM from where the refit ended (what a
  fit that is read does) to the joint fixed point: reached or not, its CPU against the refit's own, how far the
  learned values moved (largest change in log units) and the gain in evidence plus log prior.

Run: ``OPENBLAS_NUM_THREADS=1 python docs/log/investigations/bench_learned_refits.py --signals 6 --examine 25``
(about 10 CPU minutes). CPU time; never asserts on time.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

import adaptcs.models._ep_learning as lrn
import adaptcs.models.spike_slab_ep as spike_slab_ep
from adaptcs.experiments import run_job


def capture_fits(signals: int) -> list[dict]:
    """Every fit of ``signals`` learned E3 design loops: the problem, where it started and how it ended."""
    fits, infer = [], lrn.infer

    def recorded(problem, start, sites, learn, **kw):
        began = time.process_time()
        out = infer(problem, start, sites, learn, **kw)
        fits.append(dict(problem=problem, start=start, sites=sites, learn=learn, kw=kw, out=out,
                         cpu=time.process_time() - began, warm=kw.get("warm") is not None,
                         read=kw.get("strict", False) or kw.get("warm") is None))
        return out

    spike_slab_ep.lrn.infer = recorded
    try:
        for r in range(signals):
            job = run_job("E3", 0, "gss_ep", "design", [r], hyperparameters="learned")
            print(f"  signal {r}: final error {job.errors[0, -1]:.4f}", flush=True)
    finally:
        spike_slab_ep.lrn.infer = infer
    return fits


def step_left(fit: dict) -> float:
    out = fit["out"]
    return lrn.em_step(fit["problem"], out.hyper, out.run, fit["learn"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signals", type=int, default=6)
    parser.add_argument("--examine", type=int, default=25, help="tracked refits not converged to take on by SQUAREM")
    args = parser.parse_args()
    with threadpool_limits(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fits = capture_fits(args.signals)
        warm = [f for f in fits if f["warm"] and not f["read"]]
        stopped = [f for f in warm if not (f["out"].converged and f["out"].run.converged)]
        steps = np.array([step_left(f) for f in warm])
        print(f"\ntracked refits: {len(stopped)} of {len(warm)} not converged; EM-like step left (log units) "
              f"quartiles {np.round(np.quantile(steps, [0.25, 0.5, 0.75]), 3).tolist()}, max {steps.max():.3g}")
        read = [f for f in fits if f["read"]]
        print(f"fits read: {sum(not (f['out'].converged and f['out'].run.converged) for f in read)} of {len(read)} "
              "not converged")
        for f in read:
            out = f["out"]
            if not (out.converged and out.run.converged):
                print(f"  n = {f['problem'].n}, {'warm, strict' if f['warm'] else 'cold'}: EP "
                      f"{'converged' if out.run.converged else f'short (residual {out.run.residual:.3g}, '}"
                      f"{'' if out.run.converged else f'{out.run.n_clamped} sites clamped)'}, EM-like step left "
                      f"{step_left(f):.3g}; {f['cpu']:.1f} CPU s")
        print("\n| rows | refit CPU s | step left | SQUAREM: reached | CPU s | values moved "
              "| evidence + log prior gained |")
        print("|---:|---:|---:|---|---:|---:|---:|")
        reached, ratios = 0, []
        for f in stopped[: args.examine]:
            problem, out, learn = f["problem"], f["out"], f["learn"]
            began = time.process_time()
            found, _ = lrn._squarem(problem, out.hyper, out.run.sites, learn, tol=f["kw"]["tol"],
                                    max_iter=f["kw"]["max_iter"])
            cpu = time.process_time() - began
            ratios.append(cpu / f["cpu"])
            moved = gained = "-"
            if found is not None:
                reached += 1
                mask = lrn._mask(problem, learn)
                moved = f"{np.max(np.abs(found.hyper.phi() - out.hyper.phi())[mask]):.3g}"
                gain = lrn.objective(problem, found.hyper, found.run) - lrn.objective(problem, out.hyper, out.run)
                gained = f"{gain:.3g}"
            print(f"| {problem.n} | {f['cpu']:.2f} | {step_left(f):.3g} | {found is not None} | {cpu:.2f} | {moved} "
                  f"| {gained} |", flush=True)
        if ratios:
            print(f"\nSQUAREM reached the joint fixed point from {reached} of {len(ratios)}; its CPU over the refit's: "
                  f"median {np.median(ratios):.0f}x, max {np.max(ratios):.0f}x")


if __name__ == "__main__":
    main()
