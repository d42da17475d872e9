"""Compare every number in the HDF5 files of two results folders (e.g. a cluster run against a local run).

    python -m adaptcs.compare_runs results-local results-cluster

Exits 1 and lists the differences when the two folders do not hold the same HDF5 files with the same groups,
datasets, shapes, dtypes and values (NaN equals NaN), and the same attributes. Left out, as they cannot be
equal between two runs: the timings (``fit_seconds``, ``select_seconds``), the creation time, the attribute
digest that covers it, and the results folder inside the recorded config.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py
import numpy as np

TIMINGS = {"fit_seconds", "select_seconds"}
RUN_ATTRIBUTES = {"created", "attrs_sha256", "data_sha256"}  # digests cover the timings, which differ run to run


def _comparable_attr(name: str, value, root: Path | None):
    if isinstance(value, bytes):
        value = value.decode()
    if name == "config" and isinstance(value, str):
        return json.loads(value if root is None else value.replace(str(root), "<results>"))
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _equal_arrays(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def _compare_objects(a, b, where: str, roots: tuple[Path, Path], out: list[str]) -> None:
    for name in sorted(set(a.attrs) | set(b.attrs)):
        if name in RUN_ATTRIBUTES:
            continue
        if name not in a.attrs or name not in b.attrs:
            out.append(f"{where}: attribute {name} only in {'the first' if name in a.attrs else 'the second'}")
        elif _comparable_attr(name, a.attrs[name], roots[0]) != _comparable_attr(name, b.attrs[name], roots[1]):
            out.append(f"{where}: attribute {name} differs")
    if not isinstance(a, h5py.Group):
        return
    for key in sorted(set(a) | set(b)):
        path = f"{where}/{key}"
        if key not in a or key not in b:
            out.append(f"{path}: only in {'the first' if key in a else 'the second'}")
            continue
        x, y = a[key], b[key]
        if isinstance(x, h5py.Group) != isinstance(y, h5py.Group):
            out.append(f"{path}: a group in one file, a dataset in the other")
            continue
        if isinstance(x, h5py.Dataset) and key not in TIMINGS:
            u, v = x[()], y[()]
            if not _equal_arrays(np.asarray(u), np.asarray(v)):
                detail = ""
                if np.shape(u) == np.shape(v) and np.asarray(u).dtype.kind in "fiu":
                    diff = np.abs(np.asarray(u, dtype=float) - np.asarray(v, dtype=float))
                    detail = f" (largest difference {np.nanmax(diff):.3g})" if diff.size else ""
                out.append(f"{path}: values differ{detail}")
        _compare_objects(x, y, path, roots, out)


def compare_files(first, second) -> list[str]:
    """The differences between two HDF5 result files (empty when every number and attribute agrees, the recorded
    config included)."""
    roots = (None, None)
    out: list[str] = []
    with h5py.File(first, "r", locking=False) as a, h5py.File(second, "r", locking=False) as b:
        _compare_objects(a, b, Path(first).name, roots, out)
    return out


def compare_result_trees(first, second) -> tuple[int, list[str]]:
    """(number of HDF5 files compared, differences) between two results folders.

    Parameters
    ----------
    first, second : path-like
        Results folders (``results:`` of a config); every ``*.h5`` below them is compared.
    """
    roots = (Path(first).resolve(), Path(second).resolve())
    files = [{p.relative_to(root) for p in root.rglob("*.h5")} for root in roots]
    out = [f"{rel}: only in {roots[i]}" for i in (0, 1) for rel in sorted(files[i] - files[1 - i])]
    common = sorted(files[0] & files[1])
    for rel in common:
        with h5py.File(roots[0] / rel, "r", locking=False) as a, h5py.File(roots[1] / rel, "r", locking=False) as b:
            _compare_objects(a, b, str(rel), roots, out)
    return len(common), out


def main(argv=None) -> int:
    """Compare two results folders; returns 0 when they agree, 1 when they differ."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m adaptcs.compare_runs FIRST_RESULTS SECOND_RESULTS", file=sys.stderr)
        return 2
    missing = [a for a in args if not Path(a).is_dir()]
    if missing:
        print(f"not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    n_files, differences = compare_result_trees(*args)
    if n_files == 0:
        print(f"no HDF5 files in common below {args[0]} and {args[1]}", file=sys.stderr)
        return 1
    for line in differences:
        print(line)
    print(f"{n_files} HDF5 files compared: " + (f"{len(differences)} differences" if differences else
                                                "every number equal (timings left out)"))
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
