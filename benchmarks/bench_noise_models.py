"""Where the noise model matters in a basis-scan reconstruction: the same rows and values fitted with one noise
variance or the photon model, each learned or given its true value. Simulated.

For each of the 18 images of ``bench_scan_orders.py`` (64 x 64 Haar, an 8 x 8 approximation, every basis image
measured once with photon noise, the same seeds), the rows are those the shipped replay measures up to
``--fraction`` in each order (``--orders``; one noise variance learned, the replay's default). On those rows and
values the prediction prior is fitted four ways, each from scratch to its fixed point
(:func:`adaptcs.design.candidates.converged_copy`, the fit a replay reads):

- ``one, learned``: one noise variance, learned (the replay's default);
- ``photon, learned``: the photon model (``noise="photon"``), its scale learned;
- ``one, true``: one noise variance, fixed at the mean true variance of the measured values;
- ``photon, known``: the photon model told the photon level (``photons=``), as a camera of known gain.

Each fit's error against the true image is split into the measured and the unmeasured coefficients, and its
variance of each measured value is compared with the camera's true one (``|a_j| . x / photons``).

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_noise_models.py --out noise_models.csv`` (both photon
levels: about 45 CPU minutes, a third of it the replays that choose the rows); ``--summary-only`` prints the summary
of an existing ``--out``.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp
from bench_scan_orders import IMAGES, image, psnr
from threadpoolctl import threadpool_limits

from adaptcs.bases.images import make_basis
from adaptcs.design.basis_scan import photon_basis_scan, replay_basis_scan
from adaptcs.design.candidates import converged_copy
from adaptcs.models.wavelet_tree import WaveletTreeSpikeSlab
from adaptcs.replay import make_estimator

SIDE = 64
FITS = ("one, learned", "photon, learned", "one, true", "photon, known")


def _fits(basis, photons: float, true_variance: np.ndarray) -> dict:
    """The four estimators, unfitted; ``true_variance`` of the measured values."""
    given = ("p_on", "p_off", "v0")  # everything but the noise learned
    return {
        "one, learned": WaveletTreeSpikeSlab(basis, prediction=True),
        "photon, learned": WaveletTreeSpikeSlab(basis, prediction=True, noise="photon"),
        "one, true": WaveletTreeSpikeSlab(basis, prediction=True, noise_var=float(np.mean(true_variance)),
                                          learn=given),
        "photon, known": WaveletTreeSpikeSlab(basis, prediction=True, noise="photon", photons=photons),
    }


def run(args) -> None:
    out = Path(args.out)
    if out.exists():
        raise SystemExit(f"{out} exists; give another --out")
    warnings.simplefilter("ignore")
    basis = make_basis("haar", SIDE, level=int(np.log2(SIDE // 8)))
    with threadpool_limits(1):
        for photons in args.photons:
            for name in args.images:
                r = IMAGES.index(name)  # the seeds of bench_scan_orders.py
                truth = image(name, SIDE)
                values = photon_basis_scan(basis, truth, photons, np.random.default_rng([44, SIDE, int(photons), r]))
                coef_true = basis.analyze(truth.ravel())
                camera_variance = basis.pattern_light(truth.ravel()) / photons
                for order in args.orders:
                    replay = replay_basis_scan(make_estimator("prediction", basis, values), basis, values, order,
                                               [args.fraction], rng=r)
                    rows = replay.measured[: replay.n[-1]]
                    X = sp.csr_matrix((np.ones(rows.size), (np.arange(rows.size), rows)), shape=(rows.size, basis.d))
                    measured = np.zeros(basis.d, dtype=bool)
                    measured[rows] = True
                    records = []
                    for fit_name, estimator in _fits(basis, photons, camera_variance[rows]).items():
                        started = time.process_time()
                        fit = converged_copy(estimator, X, values[rows])
                        error = (fit.coef_ - coef_true) ** 2
                        model_variance = fit.noise_var_ * fit.noise_weight_[rows]
                        records.append({"photons": photons, "image": name, "order": order, "fit": fit_name,
                                        "n": rows.size, "psnr_truth": psnr(basis.synthesize(fit.coef_), truth),
                                        "error_measured": float(error[measured].sum()),
                                        "error_unmeasured": float(error[~measured].sum()),
                                        "variance_ratio": float(np.median(model_variance / camera_variance[rows])),
                                        "noise_var": fit.noise_var_, "converged": int(fit.converged_),
                                        "cpu_seconds": time.process_time() - started})
                    pd.DataFrame(records).to_csv(out, mode="a", header=not out.exists(), index=False)
                print(f"{photons:g} photons, {name} done", flush=True)


def summary(path) -> str:
    table = pd.read_csv(path)
    table["measured_share"] = table["error_measured"] / (table["error_measured"] + table["error_unmeasured"])
    lines = []
    for (photons, order), part in table.groupby(["photons", "order"]):
        wide = part.pivot(index="image", columns="fit")
        base = wide["psnr_truth"]["one, learned"]
        lines += [f"\n{photons:g} photons per unit intensity, the rows of the {order} order at "
                  f"{part['n'].iloc[0]} of {SIDE * SIDE}, {len(wide)} images (simulated); PSNR against the true image",
                  "| fit | PSNR | minus one, learned [images better] | measured share of the error (median) | "
                  "model / true variance of the measured values (median) | not converged |",
                  "|---|---:|---:|---:|---:|---:|"]
        for fit in FITS:
            difference = wide["psnr_truth"][fit] - base
            lines.append(f"| {fit} | {wide['psnr_truth'][fit].mean():.2f} | {difference.mean():+.3f} +- "
                         f"{difference.std(ddof=1) / np.sqrt(len(difference)):.3f} [{int((difference > 0).sum())}] | "
                         f"{wide['measured_share'][fit].median():.3f} | {wide['variance_ratio'][fit].median():.2f} | "
                         f"{int((wide['converged'][fit] == 0).sum())} |")
    lines.append(f"\nCPU s per fit (mean): {table['cpu_seconds'].mean():.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="CSV of every fit (appended as it goes)")
    parser.add_argument("--photons", nargs="+", type=float, default=[1e3, 1e4])
    parser.add_argument("--images", nargs="+", default=list(IMAGES), choices=IMAGES)
    parser.add_argument("--orders", nargs="+", default=["design", "predict"], choices=["design", "predict"])
    parser.add_argument("--fraction", type=float, default=0.10, help="the rows measured (default 0.10)")
    parser.add_argument("--summary-only", action="store_true", help="print the summary of an existing --out")
    args = parser.parse_args()
    if not args.summary_only:
        run(args)
    print(summary(args.out))


if __name__ == "__main__":
    main()
