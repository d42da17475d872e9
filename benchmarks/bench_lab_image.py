"""A lab session on an image, as a newcomer runs it: what the learned noise does, and what the lab says about it.

The instrument is simulated: scikit-image's camera photograph resized to ``--side`` x ``--side`` (intensities in
[0, 1]), measured by the rows the lab asks for with Gaussian noise of variance ``--noise`` (``y = X x + e``,
rows in pixels). The session is ``design init --basis haar --side <side>`` (everything learned; with
``--give-noise``, ``--noise-var`` set to the truth) and ``--rounds`` of ``next --batch <batch>`` and ``add``.
Printed per round: rows told, PSNR of the posterior mean image against the true image, the learned noise
variance, and whether ``next`` printed the lab's caution about the noise. Everything here is simulated.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_lab_image.py`` (and ``--give-noise``; under a minute each).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from adaptcs.cli import main as cli
from adaptcs.lab import rows as lab


def camera_image(side: int) -> np.ndarray:
    """scikit-image's camera photograph resized to ``side x side``, intensities in [0, 1], flattened."""
    from skimage import data
    from skimage.transform import resize

    return resize(data.camera() / 255.0, (side, side), anti_aliasing=True).ravel()


def session(side: int, noise: float, rounds: int, batch: int, give_noise: bool, folder: Path) -> list[dict]:
    """Run the session; one record per round (rows, psnr, noise_var, cautioned)."""
    image = camera_image(side)
    rng = np.random.default_rng(0)
    state = folder / "lab.h5"
    init = ["design", "init", "--basis", "haar", "--side", str(side), "--state", str(state)]
    with contextlib.redirect_stdout(io.StringIO()):
        cli(init + (["--noise-var", repr(noise)] if give_noise else []))
    peak = float(np.ptp(image))
    records = []
    for _ in range(rounds):
        said = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(said):
            cli(["design", "next", "--state", str(state), "--batch", str(batch), "--out", str(folder / "rows.csv")])
        rows = np.loadtxt(folder / "rows.csv", delimiter=",", ndmin=2)
        np.savetxt(folder / "y.csv", rows @ image + rng.normal(0.0, np.sqrt(noise), rows.shape[0]), fmt="%.17g")
        with contextlib.redirect_stdout(io.StringIO()):
            cli(["design", "add", "--state", str(state), "--rows", str(folder / "rows.csv"), "--values",
                 str(folder / "y.csv")])
        _, summary = lab.estimate(state, folder / "estimate.csv", folder / "image.csv")
        estimate = np.loadtxt(folder / "image.csv", delimiter=",").ravel()
        records.append({"rows": summary.n_rows, "psnr": 10 * np.log10(peak**2 / np.mean((estimate - image) ** 2)),
                        "noise_var": summary.hyperparameters["noise_var"], "converged": summary.converged,
                        "cautioned": "caution: noise_var=" in said.getvalue()})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=32)
    parser.add_argument("--noise", type=float, default=1e-4, help="the instrument's noise variance")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--give-noise", action="store_true", help="tell the lab the noise variance (--noise-var)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with threadpool_limits(1), tempfile.TemporaryDirectory() as folder:
        records = session(args.side, args.noise, args.rounds, args.batch, args.give_noise, Path(folder))
    print(f"{args.side} x {args.side} camera photograph, noise variance {args.noise:g}, noise "
          f"{'given' if args.give_noise else 'learned'}")
    print("| rows | PSNR (dB) | noise_var | converged | lab's caution on the noise |\n|---:|---:|---:|---|---|")
    for r in records:
        print(f"| {r['rows']} | {r['psnr']:.1f} | {r['noise_var']:.3g} | {r['converged']} | "
              f"{'yes' if r['cautioned'] else 'no'} |")


if __name__ == "__main__":
    main()
