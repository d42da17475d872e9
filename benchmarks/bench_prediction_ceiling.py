"""How much better than the wavelet-prediction scan can any order be that knows only what the prediction knows?
An upper bound for issue 44's 0.5 dB at 10 % (simulated, noise-free).

For each of the 18 images of ``bench_scan_orders.py`` (64 x 64 and 128 x 128, Haar with an 8 x 8 approximation),
the exact coefficients ``c`` are taken and every detail ``c_j`` is predicted as ``beta_s p_j`` from the true
coarser scales (``p`` of :func:`adaptcs.bases.prediction.predicted_coefficients`, ``beta_s`` the least-squares
gain of scale ``s`` on this image: both are what the prediction prior of the replay learns, here with hindsight).
An order measures the approximation and then ``k`` details; a measured detail is known exactly, an unmeasured one
is its prediction, so the image's squared error is the residual energy ``sum (c_j - beta_s p_j)^2`` of the
unmeasured details (Haar is orthonormal), and the difference of two orders in PSNR is ``10 log10`` of their
ratio. With ``--wavelet bior2.2`` (Le Gall 5/3, not orthonormal) the errors are measured in the image (the
reconstruction synthesised), and every score is weighted by the squared norm of its coefficient's synthesis
function, so that the orders rank by expected image error. Orders compared with the prediction scan (coarse to
fine, within a scale the largest ``p_j^2`` first):

* ``variance p2``: all details ranked together by ``a_s + k_s p_j^2`` with ``a_s, k_s >= 0`` fitted per scale to
  this image's own squared residuals (non-negative least squares): a per-scale Gaussian model whose variance grows
  with the predicted magnitude, calibrated in hindsight - the best ranking the replay's prior could reach;
* ``variance |p|, p2``: the same with a term in ``|p_j|`` too;
* ``variance +tree +nbrs``: with the parent's squared value and the mean predicted square of the 3 x 3 neighbours
  (same subband) as well, fitted the same way;
* ``+ parent's residual``: all of the above and the parent position's squared residual ``(c - beta p)^2`` summed
  over its three orientations (where the interpolation already failed one scale up), fitted the same way;
* ``prediction + parent's residual``: the prediction scan, but within a scale ranked by ``p^2`` plus a quarter of
  the parent position's squared residual, each normalised by its mean over the scale (nothing fitted; the weight
  the best of 0.25, 0.5, 1, 2, 4 at 64 x 64);
* ``adaptive nbrs``: the prediction scan, but within a scale in batches of 16, each ranked by ``p^2`` (normalised by
  its mean) plus the mean squared residual of the already measured details in the 3 x 3 neighbourhood (all three
  orientations; normalised by the mean measured one), weight 0.5 (the best of 0.5, 1, 2, 4, 8 at 64 x 64);
* ``oracle``: the details with the largest true residuals first (no scan can know them).

Every fitted model is fitted to the very residuals it ranks, and the parent's value and residual are taken as
known even where a ranking reaches a detail before its parent, so these are optimistic. Prints design-free gains
over the prediction scan: mean +- s.e. [images better] per size and fraction. Run:
``python benchmarks/bench_prediction_ceiling.py`` (about a minute). Simulated; no noise.
"""

from __future__ import annotations

import argparse

import numpy as np
from bench_scan_orders import IMAGES, image
from scipy import ndimage
from scipy.optimize import nnls

from adaptcs.bases.images import make_basis
from adaptcs.bases.prediction import predicted_coefficients

FRACTIONS = (0.05, 0.10, 0.15, 0.25)
ADAPTIVE_WEIGHT, ADAPTIVE_BATCH = 0.5, 16
PARENT_RESIDUAL_WEIGHT = 0.25


def hindsight_prediction(c: np.ndarray, p: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """``beta_s p`` of every detail, ``beta_s`` the least-squares gain per scale in hindsight; 0 for the
    approximation."""
    predicted = np.zeros_like(p)
    for s in range(1, int(scales.max()) + 1):
        i = scales == s
        predicted[i] = (float(c[i] @ p[i] / (p[i] @ p[i])) if np.any(p[i]) else 0.0) * p[i]
    return predicted


def subband_grid(values: np.ndarray, side: int) -> np.ndarray:
    """A scale's details (interleaved horizontal, vertical, diagonal per position) as ``(side, side, 3)``."""
    return values.reshape(side, side, 3)


def neighbour_mean(grid: np.ndarray) -> np.ndarray:
    """Mean over the 3 x 3 neighbourhood (periodic) of each subband of ``(s, s, 3)``, same shape."""
    return ndimage.uniform_filter(grid, size=(3, 3, 1), mode="wrap")


def parent_square(basis, c: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The squared true value of each detail's parent (0 at the first detail scale), shape (d,)."""
    out = np.zeros(basis.d)
    for s in range(2, int(scales.max()) + 1):
        side = int(np.sqrt(np.sum(scales == s) // 3))
        parent = subband_grid(c[scales == s - 1], side // 2) ** 2
        out[scales == s] = np.repeat(np.repeat(parent, 2, axis=0), 2, axis=1).ravel()
    return out


def parent_residual(basis, r2: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """The squared residuals ``r2`` of each detail's parent position, summed over its three orientations (0 at the
    first detail scale), shape (d,)."""
    out = np.zeros(basis.d)
    for s in range(2, int(scales.max()) + 1):
        side = int(np.sqrt(np.sum(scales == s) // 3))
        parent = subband_grid(r2[scales == s - 1], side // 2).sum(axis=-1, keepdims=True)
        out[scales == s] = np.repeat(np.repeat(np.repeat(parent, 3, axis=-1), 2, axis=0), 2, axis=1).ravel()
    return out


def calibrated_score(features: list[np.ndarray], r2: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Per scale, the non-negative least-squares fit of ``r2`` on ``[1, features...]``: the expected residual."""
    score = np.full(r2.shape, np.inf)
    for s in range(1, int(scales.max()) + 1):
        i = scales == s
        A = np.column_stack([np.ones(i.sum())] + [f[i] for f in features])
        weights, _ = nnls(A, r2[i])
        score[i] = A @ weights
    return score


def prediction_scan(p: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Coarse to fine; within a scale the largest predicted square first. Indices in order, shape (d,)."""
    return np.lexsort((-p**2, scales))


def parent_residual_scan(p: np.ndarray, parent_r2: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Coarse to fine; within a scale by ``p^2`` plus ``PARENT_RESIDUAL_WEIGHT`` times the parent's squared
    residual, each normalised by its mean over the scale. Indices in order, shape (d,)."""
    score = np.zeros(p.shape)
    for s in range(1, int(scales.max()) + 1):
        i = scales == s
        score[i] = p[i] ** 2 / np.mean(p[i] ** 2)
        if s > 1:
            score[i] += PARENT_RESIDUAL_WEIGHT * parent_r2[i] / np.mean(parent_r2[i])
    return np.lexsort((-score, scales))


def adaptive_scan(p: np.ndarray, r2: np.ndarray, scales: np.ndarray, k: int) -> np.ndarray:
    """The prediction scan with measured neighbours' residuals added within a scale (see the module text); the
    first ``k`` indices."""
    chosen = list(np.flatnonzero(scales == 0))
    for s in range(1, int(scales.max()) + 1):
        idx = np.flatnonzero(scales == s)
        side = int(np.sqrt(idx.size // 3))
        p2 = p[idx] ** 2 / np.mean(p[idx] ** 2)
        taken = np.zeros(idx.size, dtype=bool)
        while not taken.all() and len(chosen) < k:
            score = p2.copy()
            if taken.any():
                measured = neighbour_mean(subband_grid(np.where(taken, r2[idx], 0.0), side).sum(-1, keepdims=True))
                count = neighbour_mean(subband_grid(taken.astype(float), side).sum(-1, keepdims=True))
                local = np.divide(measured, count, out=np.zeros_like(measured), where=count > 0)
                score += ADAPTIVE_WEIGHT * np.repeat(local.ravel(), 3) / np.mean(r2[idx][taken])
            score[taken] = -np.inf
            batch = np.argsort(-score)[:min(ADAPTIVE_BATCH, k - len(chosen), int((~taken).sum()))]
            taken[batch] = True
            chosen.extend(idx[batch])
        if len(chosen) >= k:
            break
    return np.asarray(chosen[:k])


def left(r2: np.ndarray, order: np.ndarray, k: int, image_error=None) -> float:
    """Squared error with the details not among the first ``k`` of ``order`` predicted: their residual energy, or
    ``image_error(unmeasured)`` where given (a biorthogonal basis)."""
    unmeasured = np.ones(r2.shape, dtype=bool)
    unmeasured[order[:k]] = False
    return float(np.sum(r2[unmeasured])) if image_error is None else image_error(unmeasured)


def synthesis_weight(basis, scales: np.ndarray) -> np.ndarray:
    """Squared norm of each coefficient's synthesis function (periodic: one value per scale and orientation; ones
    for an orthonormal basis), shape (d,)."""
    weight = np.empty(basis.d)
    for s in range(int(scales.max()) + 1):
        index = np.flatnonzero(scales == s)
        orientations = 1 if s == 0 else 3
        for o in range(orientations):
            unit = np.zeros(basis.d)
            unit[index[o]] = 1.0
            weight[index[o::orientations]] = float(np.sum(basis.synthesize(unit) ** 2))
    return weight


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sides", type=int, nargs="+", default=[64, 128])
    parser.add_argument("--wavelet", default="haar", choices=("haar", "bior2.2"))
    args = parser.parse_args()
    names = ("variance p2", "variance |p|, p2", "variance +tree +nbrs", "+ parent's residual",
             "prediction + parent's residual", "adaptive nbrs", "oracle")
    for side in args.sides:
        basis = make_basis(args.wavelet, side, level=int(np.log2(side // 8)))
        scales = basis.scales()
        weight = synthesis_weight(basis, scales)
        gains = {(name, f): [] for name in names for f in FRACTIONS}
        for name in IMAGES:
            c = basis.analyze(image(name, side))
            p = predicted_coefficients(basis, c)
            predicted = hindsight_prediction(c, p, scales)
            r2 = (c - predicted) ** 2
            image_error = None
            if args.wavelet != "haar":

                def image_error(unmeasured, c=c, predicted=predicted, basis=basis):
                    return float(np.sum(basis.synthesize(np.where(unmeasured, c - predicted, 0.0)) ** 2))
            nbr = np.zeros(basis.d)
            for s in range(1, int(scales.max()) + 1):
                sub = int(np.sqrt(np.sum(scales == s) // 3))
                nbr[scales == s] = neighbour_mean(subband_grid(p[scales == s] ** 2, sub)).ravel()
            detail_r2 = np.where(scales > 0, r2, 0.0) * weight
            parent_r2 = parent_residual(basis, detail_r2, scales)
            every_feature = [np.abs(p), p**2, parent_square(basis, c, scales), nbr, parent_r2]
            orders = {
                "variance p2": np.argsort(-calibrated_score([p**2], detail_r2, scales)),
                "variance |p|, p2": np.argsort(-calibrated_score([np.abs(p), p**2], detail_r2, scales)),
                "variance +tree +nbrs": np.argsort(-calibrated_score(
                    [p**2, parent_square(basis, c, scales), nbr], detail_r2, scales)),
                "+ parent's residual": np.argsort(-calibrated_score(every_feature, detail_r2, scales)),
                "prediction + parent's residual": parent_residual_scan(p, parent_r2, scales),
                "oracle": np.argsort(-np.where(scales == 0, np.inf, detail_r2)),
            }
            base_order = prediction_scan(p, scales)
            for f in FRACTIONS:
                k = int(round(f * basis.d))
                base = left(detail_r2, base_order, k, image_error)
                for order_name in names:
                    order = adaptive_scan(p, detail_r2, scales, k) if order_name == "adaptive nbrs" \
                        else orders[order_name]
                    error = left(detail_r2, order, k, image_error)
                    gains[order_name, f].append(10 * np.log10(base / max(error, 1e-300)))
        print(f"\n{side} x {side} {args.wavelet}, 18 images, noise-free: PSNR gain over the prediction scan (dB), "
              "mean +- s.e. [images better]\n")
        print("| order | " + " | ".join(f"{f:.0%}" for f in FRACTIONS) + " |")
        print("|---|" + "---:|" * len(FRACTIONS))
        for order_name in names:
            cells = []
            for f in FRACTIONS:
                g = np.asarray(gains[order_name, f])
                cells.append(f"{g.mean():+.2f} +- {g.std(ddof=1) / np.sqrt(g.size):.2f} [{int(np.sum(g > 1e-9))}]")
            print(f"| {order_name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
