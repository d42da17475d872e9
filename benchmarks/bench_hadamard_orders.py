"""Simulated single-pixel-camera scans with Walsh-Hadamard patterns, replayed in every acquisition order: does
Bayesian design choose Hadamard patterns better than the sequency order (low to high) and a random order?

The operator is :class:`adaptcs.operators.HadamardPatterns` (the patterns most single-pixel cameras show), fitted
in a Haar basis with an 8 x 8 approximation by GSS-EP with a prior per scale, everything learned (the replay's
"scales" prior). Each of the 18 images of ``bench_scan_orders.py`` is "measured" once through every pattern with
photon noise (:func:`adaptcs.design.basis_scan.photon_scan`: positive and negative parts, ``--photons`` per unit
intensity), seeded by image and photon level only; every order then replays the acquisition on those same values
(:func:`adaptcs.design.basis_scan.replay_recording`), measuring the 8 x 8 lowest sequencies first (they span the
Haar approximation). Reconstructions are scored by PSNR against the true image. Everything here is simulated.

Rows are appended to ``--out`` (CSV) as they are made (``--resume`` goes on); the summary printed at the end
(and by ``--summary-only``): mean PSNR per order and design minus each other order, paired, mean +- s.e. [images
where design won].

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_hadamard_orders.py --out hadamard_orders.csv``
(32 x 32, two photon levels).
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from bench_scan_orders import IMAGES, image, paired_table, psnr
from threadpoolctl import threadpool_limits

from adaptcs.bases.images import make_basis
from adaptcs.design.basis_scan import photon_scan, replay_recording
from adaptcs.operators import HadamardPatterns
from adaptcs.replay import make_estimator

FRACTIONS = (0.10, 0.15, 0.25)
ORDERS = ("design", "topdown", "random")


def run(args) -> None:
    out = Path(args.out)
    done = set()
    if args.resume and out.exists():
        previous = pd.read_csv(out)
        done = set(zip(previous["side"], previous["photons"], previous["image"], previous["order"], strict=True))
    elif out.exists():
        raise SystemExit(f"{out} exists; give --resume to go on from it, or another --out")
    warnings.simplefilter("ignore")
    side = args.side
    basis = make_basis("haar", side, level=int(np.log2(side // 8)))
    operator = HadamardPatterns(side, basis, n_first=64)
    with threadpool_limits(1):
        for photons in args.photons:
            for r, name in enumerate(args.images):
                truth = image(name, side)
                values = photon_scan(operator, truth, photons, np.random.default_rng([45, side, int(photons), r]))
                for order in args.orders:
                    if (side, photons, name, order) in done:
                        continue
                    started = time.process_time()
                    replay = replay_recording(make_estimator("scales", basis, values), operator, values, order,
                                              FRACTIONS, rng=r)
                    cpu = time.process_time() - started
                    rows = [{"side": side, "photons": photons, "image": name, "order": order,
                             "fraction": n / operator.n_candidates, "psnr": psnr(basis.synthesize(c), truth),
                             "converged": int(ok), "cpu_seconds": cpu}
                            for n, c, ok in zip(replay.n, replay.coef, replay.converged, strict=True)]
                    pd.DataFrame(rows).to_csv(out, mode="a", header=not out.exists(), index=False)
                print(f"{side} x {side}, {photons:g} photons, {name} done", flush=True)


def summary(path) -> str:
    """Markdown: mean PSNR per order and design minus each other order, paired, per (side, photons, fraction)."""
    table = pd.read_csv(path)
    lines = []
    for (side, photons), part in table.groupby(["side", "photons"]):
        wide = part.pivot_table(index=["image", "fraction"], columns="order", values="psnr")
        images = wide.index.get_level_values("image").unique().size
        others = [o for o in ORDERS if o != "design" and o in wide.columns]
        lines += [f"\nWalsh-Hadamard patterns, {side} x {side}, {photons:g} photons per unit intensity, {images} "
                  "images (simulated); PSNR (dB, against the true image)"]
        lines += paired_table(wide, others, part)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="CSV of every scored reconstruction (appended as it goes)")
    parser.add_argument("--resume", action="store_true", help="go on from an existing --out")
    parser.add_argument("--side", type=int, default=32, choices=(16, 32, 64))
    parser.add_argument("--photons", type=float, nargs="+", default=[1e3, 1e4])
    parser.add_argument("--images", nargs="+", default=list(IMAGES), choices=IMAGES)
    parser.add_argument("--orders", nargs="+", default=list(ORDERS), choices=ORDERS)
    parser.add_argument("--summary-only", action="store_true", help="print the summary of --out and stop")
    args = parser.parse_args()
    if not args.summary_only:
        run(args)
    print(summary(args.out))


if __name__ == "__main__":
    main()
