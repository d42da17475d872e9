"""Simulated single-pixel-camera scans of 18 images, replayed in every acquisition order: the benchmark of
basis-scan design against the wavelet-prediction scan (Rousset et al. 2017), top-down and random orders.

Images (intensities in [0, 1], centre-cropped to a square and resized to ``side x side``; all offline):

- the 8 photographs of E7 (scikit-image's camera, astronaut, coffee, chelsea, rocket, coins, moon, clock);
- 4 phantoms: Shepp-Logan, a resolution target of bars drawn here, disks drawn here, seeded binary blobs;
- 4 micrographs and sky images: scikit-image's cell, microaneurysms, retina, Hubble deep field;
- 2 MNIST digits (the first 3 and the first 8 of the embedded subset), upsampled.

Every basis image of a Haar basis (``--wavelet``: or the Le Gall 5/3, ``bior2.2``, whose analysis functions are
shown) with an 8 x 8 approximation (the depth of a camera scan: ``log2(side / 8)``) is "measured" once with photon
noise (:func:`adaptcs.design.basis_scan.photon_basis_scan`: each pattern shown as
its positive and negative part, ``--photons`` per unit intensity), seeded by image and photon level only; then
each order replays the acquisition on those same values with the same estimator (``--prior``; ``--noise photon``:
the noise variance of each pattern proportional to the light it collects, the tree priors only; ``--noise
photon-known``: the same with the scan's photon level given to the estimator, as a camera's calibrated gain), and the
reconstruction is scored by PSNR against the full-scan image (all measured values synthesised: what a user of a
recorded scan can compute) and against the true image. Everything here is simulated.

Rows are appended to ``--out`` (CSV) as they are made, so a killed run keeps what it did and ``--resume`` goes on
from there. The summary printed at the end (and by ``--summary-only``): mean PSNR per order, and design minus
each other order, paired, mean +- s.e. [images where design won], per size, photon level and fraction.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_scan_orders.py --out scan_orders.csv`` (64 x 64, three
photon levels: about 25 CPU minutes); ``--sides 128`` for the larger size.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from adaptcs.bases.images import make_basis
from adaptcs.design.basis_scan import REPLAY_ORDERS, photon_basis_scan, replay_basis_scan
from adaptcs.replay import NOISE_MODELS, PRIORS, make_estimator

FRACTIONS = (0.05, 0.10, 0.15, 0.25)
KNOWN_PHOTONS = "photon-known"  # the photon noise model told the simulated photon level (not learned)
PHOTOGRAPHS = ("camera", "astronaut", "coffee", "chelsea", "rocket", "coins", "moon", "clock")
MICROGRAPHS = ("cell", "microaneurysms", "retina", "hubble_deep_field")
PHANTOMS = ("shepp_logan", "bars", "disks", "blobs")
DIGITS = ("digit3", "digit8")
IMAGES = PHOTOGRAPHS + PHANTOMS + MICROGRAPHS + DIGITS


def _square(image: np.ndarray) -> np.ndarray:
    n = min(image.shape[:2])
    top, left = (image.shape[0] - n) // 2, (image.shape[1] - n) // 2
    return image[top:top + n, left:left + n]


def _resized(image: np.ndarray, side: int) -> np.ndarray:
    from skimage.transform import resize

    image = np.asarray(image, dtype=float)
    image = (image - image.min()) / max(float(np.ptp(image)), 1e-12)
    return np.clip(resize(_square(image), (side, side), anti_aliasing=True), 0.0, 1.0).ravel()


def _bars(n: int = 512) -> np.ndarray:
    """A resolution target: three groups of vertical and horizontal bars of decreasing period, on grey."""
    image = np.full((n, n), 0.3)
    for k, period in enumerate((64, 32, 16)):
        top = 24 + k * (n // 3)
        stripes = (np.arange(n // 2 - 48) // (period // 2)) % 2
        image[top:top + n // 4, 24:24 + stripes.size] = 0.3 + 0.7 * stripes[None, :]
        image[top:top + stripes.size // 2, n // 2 + 24:n // 2 + 24 + n // 4][:, :] = \
            0.3 + 0.7 * stripes[:stripes.size // 2, None]
    return image


def _disks(n: int = 512) -> np.ndarray:
    """Disks of several sizes and brightnesses on a dark background."""
    yy, xx = np.mgrid[:n, :n]
    image = np.full((n, n), 0.05)
    for (cy, cx, r, level) in ((130, 130, 90, 0.9), (140, 360, 50, 0.6), (360, 140, 30, 0.75), (380, 380, 110, 0.4),
                               (250, 250, 12, 1.0), (60, 420, 20, 0.5)):
        image[(yy - cy) ** 2 + (xx - cx) ** 2 <= r * r] = level
    return image


def image(name: str, side: int) -> np.ndarray:
    """Image ``name`` of :data:`IMAGES` as ``side * side`` intensities in [0, 1] (flattened row-major)."""
    import skimage.data
    from skimage.color import rgb2gray

    if name in PHOTOGRAPHS:
        from adaptcs.experiments.wavelet import natural_images

        return natural_images(side)[PHOTOGRAPHS.index(name)]
    if name == "shepp_logan":
        return _resized(skimage.data.shepp_logan_phantom(), side)
    if name == "bars":
        return _resized(_bars(), side)
    if name == "disks":
        return _resized(_disks(), side)
    if name == "blobs":
        return _resized(skimage.data.binary_blobs(length=256, blob_size_fraction=0.15, rng=3).astype(float), side)
    if name in MICROGRAPHS:
        picture = getattr(skimage.data, name)()
        return _resized(rgb2gray(picture) if picture.ndim == 3 else picture, side)
    if name in DIGITS:
        from adaptcs.data.mnist import load_mnist

        digits = load_mnist("embedded")
        first = int(np.flatnonzero(digits.labels == int(name[-1]))[0])
        return _resized(digits.images[first].reshape(28, 28), side)
    raise ValueError(f"unknown image {name!r}; one of {IMAGES}")


def psnr(estimate: np.ndarray, reference: np.ndarray) -> float:
    """PSNR in dB with the reference's range as the peak."""
    peak = float(np.ptp(reference)) or 1.0
    return float(10 * np.log10(peak**2 / np.mean((estimate - reference) ** 2)))


def run(args) -> None:
    out = Path(args.out)
    done = set()
    if args.resume and out.exists():
        previous = _read(out)
        done = set(zip(previous["prior"], previous["noise"], previous["wavelet"], previous["side"],
                       previous["photons"], previous["image"], previous["order"], strict=True))
    elif out.exists():
        raise SystemExit(f"{out} exists; give --resume to go on from it, or another --out")
    warnings.simplefilter("ignore")
    with threadpool_limits(1):
        for side in args.sides:
            basis = make_basis(args.wavelet, side, level=int(np.log2(side // 8)))
            for photons in args.photons:
                for name in args.images:
                    r = IMAGES.index(name)  # seeds by image, whichever images are run
                    truth = image(name, side)
                    rng = np.random.default_rng([44, side, int(photons), r])
                    values = photon_basis_scan(basis, truth, photons, rng)
                    full = basis.synthesize(values)
                    for order in args.orders:
                        if (args.prior, args.noise, args.wavelet, side, photons, name, order) in done:
                            continue
                        started = time.process_time()
                        known = args.noise == KNOWN_PHOTONS
                        estimator = make_estimator(args.prior, basis, values, noise="photon" if known else args.noise,
                                                   photons=photons if known else None)
                        replay = replay_basis_scan(estimator, basis, values, order, FRACTIONS, rng=r)
                        cpu = time.process_time() - started
                        rows = [{"prior": args.prior, "noise": args.noise, "wavelet": args.wavelet, "side": side,
                                 "photons": photons,
                                 "image": name, "order": order,
                                 "fraction": n / basis.d, "psnr_full": psnr(basis.synthesize(c), full),
                                 "psnr_truth": psnr(basis.synthesize(c), truth), "converged": int(ok),
                                 "cpu_seconds": cpu}
                                for n, c, ok in zip(replay.n, replay.coef, replay.converged, strict=True)]
                        pd.DataFrame(rows).to_csv(out, mode="a", header=not out.exists(), index=False)
                    print(f"{args.wavelet} {side} x {side}, {photons:g} photons, {name} done", flush=True)


def _read(path) -> pd.DataFrame:
    """The rows of ``path`` (rows written before ``--wavelet`` or ``--noise`` existed are Haar's, with one noise
    variance)."""
    table = pd.read_csv(path)
    if "noise" not in table:
        table.insert(1, "noise", "constant")
    if "wavelet" not in table:
        table.insert(2, "wavelet", "haar")
    return table


def summary(path, reference: str = "psnr_full") -> str:
    """Markdown: mean PSNR per order and design minus each other order, paired, per (side, photons, fraction)."""
    table = _read(path)
    lines = []
    for (prior, noise, wavelet, side, photons), part in table.groupby(["prior", "noise", "wavelet", "side",
                                                                       "photons"]):
        wide = part.pivot_table(index=["image", "fraction"], columns="order", values=reference)
        images = wide.index.get_level_values("image").unique().size
        others = [o for o in REPLAY_ORDERS if o != "design" and o in wide.columns]
        against = "against the full-scan image" if reference == "psnr_full" else "against the true image"
        lines += [f"\nprior {prior}, {noise} noise, {wavelet}, {side} x {side}, {photons:g} photons per unit "
                  f"intensity, {images} images; PSNR (dB, {against})"]
        lines += paired_table(wide, others, part)
    return "\n".join(lines)


def paired_table(wide: pd.DataFrame, others: list, part: pd.DataFrame) -> list[str]:
    """Markdown rows: mean PSNR per order and design minus each of ``others``, paired, mean +- s.e. [images where
    design won], per fraction (``wide``: PSNR indexed by image and fraction, one column per order); then the CPU
    time per replay and the checkpoints not converged (``part``: the long rows)."""
    lines = ["| fraction | " + " | ".join(wide.columns) + " | " + " | ".join(f"design - {o}" for o in others) + " |",
             "|---:|" + "---:|" * (len(wide.columns) + len(others))]
    for fraction, rows in wide.groupby(level="fraction"):
        means = [f"{rows[o].mean():.2f}" for o in wide.columns]
        paired = []
        for o in others:
            diff = (rows["design"] - rows[o]).dropna()
            se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else np.nan
            paired.append(f"{diff.mean():+.2f} +- {se:.2f} [{int((diff > 0).sum())}/{len(diff)}]")
        lines.append(f"| {fraction:.0%} | " + " | ".join(means) + " | " + " | ".join(paired) + " |")
    cpu = part.drop_duplicates(["image", "order"]).groupby("order")["cpu_seconds"].mean()
    lines.append("CPU s per replay: " + ", ".join(f"{o} {cpu[o]:.1f}" for o in cpu.index)
                 + f"; checkpoints not converged: {int((part['converged'] == 0).sum())} of {len(part)}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="CSV of every scored reconstruction (appended as it goes)")
    parser.add_argument("--resume", action="store_true", help="go on from an existing --out")
    parser.add_argument("--sides", type=int, nargs="+", default=[64], choices=(64, 128, 256))
    parser.add_argument("--photons", type=float, nargs="+", default=[1e3, 1e4, 1e5])
    parser.add_argument("--images", nargs="+", default=list(IMAGES), choices=IMAGES)
    parser.add_argument("--orders", nargs="+", default=list(REPLAY_ORDERS), choices=REPLAY_ORDERS)
    parser.add_argument("--prior", default="tree", choices=PRIORS)
    parser.add_argument("--noise", default="constant", choices=list(NOISE_MODELS) + [KNOWN_PHOTONS],
                        help="one noise variance for every pattern, or one proportional to its light (photon), "
                             "learned; photon-known: the photon model given the scan's photon level")
    parser.add_argument("--wavelet", default="haar", choices=("haar", "bior2.2"),
                        help="the scan's wavelet (bior2.2: Le Gall 5/3, its analysis functions shown)")
    parser.add_argument("--summary-only", action="store_true", help="print the summary of an existing --out")
    args = parser.parse_args()
    if not args.summary_only:
        run(args)
    print(summary(args.out))
    print(summary(args.out, "psnr_truth"))


if __name__ == "__main__":
    main()
