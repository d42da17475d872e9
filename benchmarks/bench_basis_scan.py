"""Replaying a single-pixel camera's full Haar scan: designed basis rows against the top-down and prediction scans.

For each of E7's natural photographs (64 x 64 by default), every Haar basis image is "measured" once with photon
noise (:func:`adaptcs.design.basis_scan.photon_basis_scan`, ``--photons`` per unit intensity); then each order
replays the acquisition on those values (:func:`adaptcs.design.basis_scan.replay_basis_scan`, d/256 coefficients
per refit, the approximation first for all), reconstructing with the same estimator:

- ``tree``: :class:`adaptcs.models.wavelet_tree.WaveletTreeSpikeSlab` as it comes (the hidden Markov tree of the
  coefficients, an exact spike, transitions, slab variances and noise learned by EM);
- ``tree_small``: the same with a small-variance off state, learned too;
- ``tree_groups``: ``tree_small`` with a state per 2 x 2 group of siblings (``states="groups"``);
- ``scales``: GSS-EP with a p0 and v0 per scale, learned (``gss_ep_scales``, no tree).

Prints the PSNR against the full-scan image (what the issue asks) at 10, 15 and 25 % of the coefficients, mean
+- standard error over the images, the paired differences design - topdown and design - predict with the
number of images where design won, and the CPU seconds per replay.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_basis_scan.py`` (``--images 4``, ``--side 32``,
``--photons 1e3``, ``--priors tree``).
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.design.basis_scan import photon_basis_scan, replay_basis_scan
from adaptcs.experiments import case_estimator
from adaptcs.experiments.wavelet import E7, NATURAL_IMAGES, wavelet_case
from adaptcs.models.wavelet_tree import WaveletTreeSpikeSlab

ORDERS = ("design", "topdown", "predict")
FRACTIONS = (0.10, 0.15, 0.25)
PRIORS = ("tree", "tree_small", "tree_groups", "scales")


def psnr(image: np.ndarray, reference: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB for intensities in [0, 1]."""
    return float(10 * np.log10(1.0 / np.mean((image - reference) ** 2)))


def estimator(prior: str, case, basis):
    if prior == "tree":
        return WaveletTreeSpikeSlab(basis)
    if prior in ("tree_small", "tree_groups"):
        return WaveletTreeSpikeSlab(basis, states="groups" if prior == "tree_groups" else "coefficients",
                                    learn=WaveletTreeSpikeSlab.LEARNABLE)
    return case_estimator("gss_ep_scales", case, hyperparameters="learned")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=len(NATURAL_IMAGES))
    parser.add_argument("--side", type=int, default=64, choices=(32, 64))
    parser.add_argument("--photons", type=float, default=1e4)
    parser.add_argument("--priors", nargs="+", default=list(PRIORS), choices=PRIORS)
    args = parser.parse_args()
    setting = next(i for i, s in enumerate(E7.settings) if s == {"images": "natural", "side": args.side})
    warnings.simplefilter("ignore")
    psnrs, cpu, unconverged = {}, {}, {}
    with threadpool_limits(1):
        for r in range(args.images):
            case, basis = wavelet_case(setting, r)
            values = photon_basis_scan(basis, case.problem.w_true, args.photons, np.random.default_rng([30, r]))
            full = basis.synthesize(values)
            for prior in args.priors:
                for order in ORDERS:
                    replay = replay_basis_scan(estimator(prior, case, basis), basis, values, order, FRACTIONS, rng=r)
                    psnrs.setdefault((prior, order), []).append([psnr(basis.synthesize(c), full) for c in replay.coef])
                    cpu.setdefault((prior, order), []).append(replay.seconds)
                    unconverged.setdefault((prior, order), []).append(int(np.sum(replay.converged == 0)))
            print(f"image {r} ({NATURAL_IMAGES[r]}) done", flush=True)
    print(f"\nFull {args.side} x {args.side} Haar scan with photon noise ({args.photons:g} photons per unit), "
          f"{args.images} images replayed; PSNR (dB) against the full-scan image, mean +- s.e.; CPU s per replay; "
          "checkpoints not converged")
    print("| prior | order | " + " | ".join(f"{f:.0%}" for f in FRACTIONS) + " | CPU s | not converged |")
    print("|---|---|" + "---:|" * (len(FRACTIONS) + 2))
    for (prior, order), values in psnrs.items():
        v = np.array(values)
        cells = [f"{v[:, i].mean():.2f} +- {v[:, i].std(ddof=1) / np.sqrt(len(v)):.2f}" for i in range(v.shape[1])]
        print(f"| {prior} | {order} | " + " | ".join(cells) + f" | {np.mean(cpu[prior, order]):.1f} | "
              f"{sum(unconverged[prior, order])} |")
    print("\nPaired: design minus the other order, dB, mean +- s.e. [images where design was higher]")
    print("| prior | versus | " + " | ".join(f"{f:.0%}" for f in FRACTIONS) + " |")
    print("|---|---|" + "---:|" * len(FRACTIONS))
    for prior in args.priors:
        design = np.array(psnrs[prior, "design"])
        for other in ORDERS[1:]:
            diff = design - np.array(psnrs[prior, other])
            cells = [f"{diff[:, i].mean():+.2f} +- {diff[:, i].std(ddof=1) / np.sqrt(len(diff)):.2f} "
                     f"[{np.sum(diff[:, i] > 0)}/{len(diff)}]" for i in range(diff.shape[1])]
            print(f"| {prior} | {other} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
