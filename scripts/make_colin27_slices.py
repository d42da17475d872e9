"""Remake ``src/adaptcs/data/colin27_slices.npz``: axial slices of the Colin27 T1 average at 0.5 mm for the MRI
line-design experiments (issue 48).

Source: Debian's ``mricron-data`` package (``/usr/share/mricron/templates/ch2better.nii.gz``: the Colin Holmes
27-scan T1 average, brain extracted, resampled to 0.5 mm, 301 x 370 x 316 voxels, uint8). Its copyright notice is
shipped next to the slices (``src/adaptcs/data/COLIN27-COPYRIGHT``).

Slices: z = 100, 120, ..., 240 are the TEST set and z = 110, 130, ..., 250 the TRAINING set (the offline greedy
mask is learned on training slices only); neighbouring slices are 5 mm apart, no slice is in both sets.

Run (needs the package file, not the installed package; no network beyond Debian's mirror)::

    apt-get download mricron-data && dpkg -x mricron-data_*.deb /tmp/mricron
    python scripts/make_colin27_slices.py /tmp/mricron
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import struct
from pathlib import Path

import numpy as np

TEST_Z = tuple(range(100, 241, 20))
TRAIN_Z = tuple(range(110, 251, 20))
VOLUME = "usr/share/mricron/templates/ch2better.nii.gz"
COPYRIGHT = "usr/share/doc/mricron-data/copyright"
OUT = Path(__file__).resolve().parents[1] / "src" / "adaptcs" / "data"


def read_nifti_uint8(path: Path) -> tuple[np.ndarray, tuple[float, float, float]]:
    """A NIfTI-1 uint8 volume as an array of shape (z, y, x) and its voxel size in mm (x, y, z)."""
    raw = gzip.open(path).read()
    dims = struct.unpack("<8h", raw[40:56])
    datatype, = struct.unpack("<h", raw[70:72])
    pixdim = struct.unpack("<8f", raw[76:108])
    offset = int(struct.unpack("<f", raw[108:112])[0])
    slope, inter = struct.unpack("<ff", raw[112:120])
    if dims[0] != 3 or datatype != 2:
        raise ValueError(f"{path}: expected a 3-D uint8 volume, got dims {dims} and datatype {datatype}")
    if slope not in (0.0, 1.0) or inter != 0.0:
        raise ValueError(f"{path}: unexpected intensity scaling {slope}, {inter}")
    nx, ny, nz = dims[1:4]
    volume = np.frombuffer(raw, np.uint8, count=nx * ny * nz, offset=offset).reshape(nz, ny, nx)
    return volume, tuple(float(p) for p in pixdim[1:4])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="where mricron-data's .deb was unpacked (dpkg -x)")
    args = parser.parse_args()
    volume, voxel = read_nifti_uint8(args.root / VOLUME)
    np.savez_compressed(OUT / "colin27_slices.npz", test=volume[list(TEST_Z)], train=volume[list(TRAIN_Z)],
                        test_z=np.array(TEST_Z), train_z=np.array(TRAIN_Z), voxel_mm=np.array(voxel))
    shutil.copyfile(args.root / COPYRIGHT, OUT / "COLIN27-COPYRIGHT")
    print(f"wrote {OUT / 'colin27_slices.npz'} ({(OUT / 'colin27_slices.npz').stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
