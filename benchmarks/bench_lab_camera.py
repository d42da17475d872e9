"""The lab's single-pixel camera loop: CPU seconds of ``next`` and ``estimate`` as the scan grows.

A simulated photon-noise scan (10^4 photons per unit intensity) of scikit-image's camera photograph at
``--side`` x ``--side`` (Haar, the default depth) is driven through the lab as a user at the instrument would:
``design init --basis haar --strategy pool --pool <the basis images>``, then rounds of ``next --batch`` and
``add`` with the values of the basis images asked for. The lab fits the replay's wavelet tree with the prediction,
told add by add; ``next`` keeps the tracked fit in the state, so the next command tells only the adds since
(``--retell``: every add again at every command, as before 2026-11-29, for comparison). Printed: the CPU seconds of
``next`` and of ``estimate`` at the row counts ``--at`` (one BLAS thread, this process only). Everything here is
simulated.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_lab_camera.py`` (64 x 64 in adds of 16 to 1,024 rows:
about 6 CPU minutes).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs._io import write_numbers
from adaptcs.bases.images import make_basis
from adaptcs.cli import main as cli
from adaptcs.design.basis_scan import photon_basis_scan
from adaptcs.lab import rows as lab


def camera_image(side: int) -> np.ndarray:
    """scikit-image's camera photograph resized to ``side x side``, intensities in [0, 1], flattened."""
    from skimage import data
    from skimage.transform import resize

    return resize(data.camera() / 255.0, (side, side), anti_aliasing=True).ravel()


def run(side: int, batch: int, at: list[int], folder: Path, retell: bool = False) -> None:
    basis = make_basis("haar", side)
    values = photon_basis_scan(basis, camera_image(side), 1e4, np.random.default_rng(0))
    write_numbers(folder / "pool.csv", basis.synthesize(np.eye(basis.d)))  # the camera's patterns, in pixels
    state = folder / ("camera-retold.h5" if retell else "camera.h5")
    cli(["design", "init", "--basis", "haar", "--side", str(side), "--strategy", "pool", "--pool",
         str(folder / "pool.csv"), "--state", str(state)])
    print("| rows told | next (CPU s) | estimate (CPU s) |\n|---:|---:|---:|", flush=True)
    while (n := lab.load_state(state).X.shape[0]) <= max(at):
        if retell:  # drop the kept tracked fit: the command tells every add again
            dropped = lab.load_state(state)
            dropped.tracked_fit = None
            lab.save_state(state, dropped)
        started = time.process_time()
        lab.next_rows(state, folder / "rows.csv", batch)
        next_seconds = time.process_time() - started
        if n in at:
            started = time.process_time()
            lab.estimate(state, folder / "estimate.csv", folder / "image.csv")
            print(f"| {n} | {next_seconds:.1f} | {time.process_time() - started:.1f} |", flush=True)
        if n == max(at):
            break
        rows = np.loadtxt(folder / "rows.csv", delimiter=",", ndmin=2)
        np.savetxt(folder / "y.csv", values[np.abs(basis.analyze(rows)).argmax(axis=1)], fmt="%.17g")
        lab.add(state, folder / "rows.csv", folder / "y.csv")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--at", type=int, nargs="+", default=[256, 512, 1024],
                        help="rows told at which to time next and estimate (multiples of --batch)")
    parser.add_argument("--retell", action="store_true",
                        help="drop the tracked fit that next keeps, so that every command tells every add again")
    parser.add_argument("--compare", action="store_true",
                        help="both, in this process: --retell first, then with the kept fit")
    args = parser.parse_args()
    if any(n % args.batch for n in args.at):
        raise SystemExit(f"--at must be multiples of --batch ({args.batch}); got {args.at}")
    warnings.simplefilter("ignore")
    with threadpool_limits(1), tempfile.TemporaryDirectory() as folder:
        for retell in (True, False) if args.compare else (args.retell,):
            print(f"\n{'every add told again (--retell)' if retell else 'with the tracked fit kept in the state'}:")
            run(args.side, args.batch, args.at, Path(folder), retell)


if __name__ == "__main__":
    main()
