"""Make the replay example: a single-pixel camera's full Haar scan of a photograph, with photon noise.

scikit-image's ``camera`` photograph, centre-cropped to a square and resized to 64 x 64 (anti-aliased,
intensities in [0, 1]), is measured through every Haar basis image with 10^4 photons per unit intensity
(:func:`adaptcs.design.basis_scan.photon_basis_scan`: each pattern shown as its positive and negative part).
Writes ``camera_haar64.csv``: 4,096 values, one per basis image in the basis's coefficient order. Deterministic
(seeded); run from the repository root: ``python examples/single_pixel/make_scan.py`` (``--side 256`` for the
large scan of the speed check, written as ``camera_haar256.csv``; ``--out`` to write it elsewhere).
"""

import argparse
from pathlib import Path

import numpy as np
from skimage import data
from skimage.transform import resize

from adaptcs.bases.images import make_basis
from adaptcs.design.basis_scan import photon_basis_scan

PHOTONS = 1e4


def photograph(side: int) -> np.ndarray:
    """The camera photograph, square, side x side, in [0, 1], flattened."""
    image = data.camera().astype(float) / 255.0
    n = min(image.shape)
    top, left = (image.shape[0] - n) // 2, (image.shape[1] - n) // 2
    return np.clip(resize(image[top:top + n, left:left + n], (side, side), anti_aliasing=True), 0, 1).ravel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=64)
    parser.add_argument("--out", type=Path, default=None,
                        help="CSV to write (default: camera_haar<side>.csv next to this script)")
    args = parser.parse_args()
    values = photon_basis_scan(make_basis("haar", args.side), photograph(args.side), PHOTONS,
                               np.random.default_rng(2017))
    out = args.out or Path(__file__).parent / f"camera_haar{args.side}.csv"
    np.savetxt(out, values, fmt="%.10g")
    print(f"wrote {out} ({values.size} values)")


if __name__ == "__main__":
    main()
