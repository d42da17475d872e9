"""GSS-EP against peer sparse Bayesian regressions on the same E3 problems, in the same process and BLAS.

Each E3 signal (d = 512, 4 active groups of 4) starts from its 32 random rows; then 32 more rows are added one at
a time and every method refits after each (GSS-EP warm-started, the peers from scratch, as they offer no warm
start). The added rows are random rows, identical for all methods (same random stream), so that the time per refit
and the error at 64 rows compare like for like; GSS-EP with designed rows is shown as well.

Peers (optional, benchmark-only dependencies): pytuq's Bayesian compressive sensing (``pytuq.lreg.bcs``, the fast
RVM of Tipping & Faul as in Ji, Xue & Carin) and scikit-learn's ``ARDRegression`` (no intercept). Neither uses the
group structure or the oracle hyper-parameters: GSS-EP is run with the paper's oracle values and with learned ones.

Run: ``pip install -e ".[bench]" && python benchmarks/bench_peers.py --signals 50``. Never asserts on time.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import ARDRegression
from threadpoolctl import threadpool_limits

from adaptcs.data.synthetic import problem_rng
from adaptcs.design import run_sequential_design
from adaptcs.experiments import synthetic_case
from adaptcs.models.registry import make_estimator


class PytuqBCS(RegressorMixin, BaseEstimator):
    """pytuq's BCS behind the fit / coef_ interface of the design loop."""

    def __init__(self, eta=1e-8):
        self.eta = eta

    def fit(self, X, y):
        from pytuq.lreg.bcs import bcs

        model = bcs(eta=self.eta)
        with np.errstate(all="ignore"):
            model.fita(np.asarray(X), np.asarray(y))
        coef = np.zeros(X.shape[1])
        coef[np.asarray(model.used, dtype=int)] = np.ravel(model.cf)
        self.coef_ = coef
        return self


def peers() -> dict:
    found = {"ard (scikit-learn)": lambda case: ARDRegression(fit_intercept=False)}
    try:
        import pytuq.lreg.bcs  # noqa: F401

        found["bcs (pytuq)"] = lambda case: PytuqBCS()
    except ImportError:
        print("pytuq is not installed (pip install -e \".[bench]\"): its BCS is left out")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signals", type=int, default=50)
    args = parser.parse_args()
    ours = {
        "gss_ep oracle": lambda case: make_estimator("gss_ep", case.fit_groups, case.prior),
        "gss_ep learned": lambda case: make_estimator("gss_ep", case.fit_groups, case.prior, hyperparameters="learned"),
    }
    runs = [(name, make, "random") for name, make in {**ours, **peers()}.items()]
    runs += [(name, make, "design") for name, make in ours.items()]
    print(f"E3, {args.signals} signals, 32 random rows then 32 more with a refit after each; 1 BLAS thread, "
          "wall time of each refit")
    print("| method | rows added | mean ms / refit | median ms / refit | max ms / refit | error at 64 rows |")
    print("|---|---|---:|---:|---:|---:|")
    with threadpool_limits(1):
        for name, make, strategy in runs:
            seconds, errors = [], []
            for replicate in range(args.signals):
                case = synthetic_case("E3", 0, replicate)
                p = case.problem
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    res = run_sequential_design(make(case), p.w_true, p.X, p.y, 32, strategy=strategy,
                                                noise_var=p.noise_var, row_norm=np.sqrt(p.w_true.shape[0]),
                                                rng=problem_rng(*case.design_seed))
                seconds.extend(res.fit_seconds[1:])
                errors.append(res.errors[-1])
            ms = 1e3 * np.asarray(seconds)
            print(f"| {name} | {strategy} | {ms.mean():.1f} | {np.median(ms):.1f} | {ms.max():.0f} | "
                  f"{np.mean(errors):.3f} +- {np.std(errors, ddof=1) / np.sqrt(len(errors)):.3f} |", flush=True)


if __name__ == "__main__":
    main()
