"""The fits a user reads on basis scans, before and after they go on to EM's fixed point (simulated scans).

At every checkpoint of designed and prediction-scan replays (the images of ``bench_scan_orders.py``, 64 x 64 Haar,
the prediction prior, simulated photon noise, the same seeds), the checkpoint's rows are fitted twice from the
same tracked fit: as before 2026-11-28 (a copy fitted with the estimator's own ``max_iter``) and as now
(:func:`adaptcs.design.candidates.converged_copy`: on from there with ``READ_FIT_BUDGET`` times the iterations,
then from scratch). The order and the rows are the same for both (the tracked fit chooses them). Prints the
checkpoints not converged before and after, the PSNR change (against the full scan) where they differ, and the CPU.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_read_fits.py --photons 1e4 --out read_fits_1e4.csv
"""

import argparse
import copy
import time
import warnings

import numpy as np
import pandas as pd
from bench_scan_orders import FRACTIONS, IMAGES, image, psnr

import adaptcs.design.basis_scan as basis_scan
import adaptcs.design.candidates as candidates
from adaptcs.bases.images import make_basis
from adaptcs.replay import make_estimator

SIDE = 64


def run(photons: float, images) -> pd.DataFrame:
    basis = make_basis("haar", SIDE, level=3)
    shipped, records, key = candidates.converged_copy, [], {}

    def both(est, rows, values):
        fits = []
        for kind, fit_copy in (("before", lambda: copy.deepcopy(est).fit(rows, values)),
                               ("after", lambda: shipped(est, rows, values))):
            started = time.process_time()
            fit = fit_copy()
            records.append({**key, "n": rows.shape[0], "kind": kind, "converged": int(fit.converged_),
                            "n_iter": fit.n_iter_, "cpu": time.process_time() - started,
                            "psnr_full": psnr(basis.synthesize(fit.coef_), key_full[0])})
            fits.append(fit)
        return fits[1]

    key_full = [None]
    candidates.converged_copy = both
    try:
        for name in images:
            r = IMAGES.index(name)  # bench_scan_orders.py's seeds: the same scan of this image whatever is asked
            rng = np.random.default_rng([44, SIDE, int(photons), r])
            values = basis_scan.photon_basis_scan(basis, image(name, SIDE), photons, rng)
            key_full[0] = basis.synthesize(values)
            for order in ("design", "predict"):
                key.update(photons=photons, image=name, order=order)
                basis_scan.replay_basis_scan(make_estimator("prediction", basis, values), basis, values, order,
                                             FRACTIONS, rng=r)
            print(name, flush=True)
    finally:
        candidates.converged_copy = shipped
    return pd.DataFrame(records)


def summary(table: pd.DataFrame) -> str:
    before = table[table.kind == "before"].reset_index(drop=True)
    after = table[table.kind == "after"].reset_index(drop=True)
    stopped = before.converged == 0
    gain = (after.psnr_full - before.psnr_full)[stopped]
    lines = [f"checkpoints {len(before)}: not converged before {int(stopped.sum())}, after "
             f"{int((after.converged == 0).sum())}"]
    if stopped.any():
        se = gain.std(ddof=1) / np.sqrt(gain.size) if gain.size > 1 else float("nan")
        lines.append(f"PSNR after - before where they differ: {gain.mean():+.3f} +- {se:.3f} dB (better "
                     f"{int((gain > 0).sum())}, worse {int((gain < 0).sum())}); iterations after: "
                     f"{int(after.n_iter[stopped].min())}-{int(after.n_iter[stopped].max())}")
    lines.append(f"checkpoint CPU s: before {before.cpu.sum():.1f}, after {after.cpu.sum():.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photons", type=float, default=1e4)
    parser.add_argument("--images", nargs="+", default=list(IMAGES), choices=IMAGES)
    parser.add_argument("--out", help="CSV of every checkpoint fit")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    table = run(args.photons, args.images)
    if args.out:
        table.to_csv(args.out, index=False)
    print(summary(table))


if __name__ == "__main__":
    main()
