"""Every input file a user gives, read and checked in one place: numbers as text, vectors and patterns (text or
``.npy``), ``.npy`` arrays, k-space (``.npy`` or HDF5 as fastMRI writes it).

Each reader returns a float or complex array or raises a ValueError (:class:`adaptcs._io.StateError` for the lab's
text files) in one line that names the file, the line or the option, and what is wrong; nothing is silently coerced.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from adaptcs._io import StateError, is_number

MAX_GROUP_LABEL = 2**31 - 1


_FIELD_SEPARATOR = re.compile(r"\s*,\s*|\s+")  # a comma (with any spaces around it), or spaces or tabs


def read_numbers(path, what: str) -> np.ndarray:
    """A text file of numbers as a 2-D float array: one record per line, the numbers separated by commas, spaces or
    tabs; ``#`` starts a comment; the first line may be a header (it is skipped when it is not all numbers)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise StateError(f"{path}: no such file ({what})") from None
    except UnicodeDecodeError:
        raise StateError(f"{path}: {what} must be a text file of numbers (this one is binary)") from None
    except IsADirectoryError:
        raise StateError(f"{path}: is a folder, not a file of {what}") from None
    records, header = [], ""
    for number, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = _FIELD_SEPARATOR.split(line)
        try:
            values = [float(field) for field in fields]
        except ValueError:
            if not records and not header:  # the first record is a header
                header = line
                continue
            bad = next(f for f in fields if not is_number(f))
            raise StateError(f"{path}: {what}: line {number} has {bad!r}, which is not a number") from None
        if records and len(values) != len(records[0]):
            raise StateError(f"{path}: {what}: line {number} has {len(values)} numbers, the first record "
                             f"{len(records[0])}; every line must have as many")
        records.append(values)
    if not records:
        raise StateError(f"{path}: {what} must be numbers separated by commas, spaces or tabs; this file has only "
                         f"the line {header!r}" if header else f"{path}: {what} is empty")
    values = np.array(records, dtype=float)
    if not np.all(np.isfinite(values)):
        bad = np.argwhere(~np.isfinite(values))[0]
        raise StateError(f"{path}: {what} has a non-finite value (NaN or infinity) in record {bad[0] + 1}, column "
                         f"{bad[1] + 1}")
    return values


def read_groups(path) -> np.ndarray:
    """Group labels, one integer per coefficient: one per line, or all on one line separated by commas."""
    values = read_numbers(path, "group labels")
    if values.shape[0] > 1 and values.shape[1] > 1:
        raise StateError(f"{path}: group labels must be one per line or all on one line; got {values.shape[0]} lines "
                         f"of {values.shape[1]}")
    values = values.ravel()
    if not np.all(values == np.round(values)) or values.min() < 0 or values.max() > MAX_GROUP_LABEL:
        bad = values[(values != np.round(values)) | (values < 0) | (values > MAX_GROUP_LABEL)][0]
        raise StateError(f"{path}: group labels must be non-negative integers up to {MAX_GROUP_LABEL}; got {bad:g}")
    return values.astype(np.int64)


def read_values(path, n_rows: int) -> np.ndarray:
    """Measured values: one per line (or all on one line), as many as there are rows."""
    values = read_numbers(path, "measured values")
    if values.shape[0] > 1 and values.shape[1] > 1:
        raise StateError(f"{path}: measured values must be one column (or one line); got {values.shape[0]} lines of "
                         f"{values.shape[1]}")
    values = values.ravel()
    if values.shape[0] != n_rows:
        raise StateError(f"{path}: {values.shape[0]} measured values for {n_rows} rows; they must match one to one")
    return values


def _real_npy(path) -> np.ndarray:
    """A ``.npy`` array of real numbers (integers or floats); ValueError for complex, boolean or text arrays,
    which a cast to float would change or misread."""
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{path}: cannot read this .npy file ({exc})") from None
    if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)):
        raise ValueError(f"{path}: holds {array.dtype} values; a scan needs real numbers (integers or floats)")
    return array


def _text_lines(path, first_only: bool = False) -> list[tuple[int, str]]:
    """(line number, text) of a text file without ``#`` comments, comment-only lines and the blank lines that end
    it; a first line that is not numbers is a header and is skipped. ``first_only``: stop at the first line of
    data (a large file is not read). ValueError naming the file if it is not text."""
    lines, first = [], 1  # first: the number of the line that may be a header
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                data, hash_, _ = line.partition("#")
                if hash_ and not data.strip():
                    first += not lines and number == first  # the header may follow comment lines
                    continue
                data = data.strip()
                if not lines and number == first and data and not all(is_number(f) for f in _fields(data)):
                    continue  # a header: the first line that is not a comment, if it is not numbers
                lines.append((number, data))
                if first_only and data:
                    break
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder, not a file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (give numbers as text, or a .npy file)") from None
    while lines and not lines[-1][1]:
        lines.pop()
    return lines


def _fields(line: str) -> list[str]:
    return [field.strip() for field in (line.split(",") if "," in line else line.split())]


def read_vector(path) -> np.ndarray:
    """A 1-D array from ``.npy`` or a text file of one value per line (a header line and ``#`` comments are
    skipped; an empty line or ``nan`` is NaN: not measured). ValueError naming the file and line otherwise."""
    path = Path(path)
    if path.suffix == ".npy":
        values = np.asarray(_real_npy(path), dtype=float)
        if values.ndim == 2 and 1 in values.shape:
            values = values.ravel()
        if values.ndim != 1:
            raise ValueError(f"{path}: expected one value per entry; got an array of shape {values.shape}")
        return values
    values = []
    for number, line in _text_lines(path):
        fields = _fields(line) if line else [""]
        if len(fields) != 1:
            raise ValueError(f"{path}: line {number} has {len(fields)} values; give one value per line")
        if not fields[0]:
            values.append(np.nan)
        elif is_number(fields[0]):
            values.append(float(fields[0]))
        else:
            raise ValueError(f"{path}: line {number} has {fields[0]!r}, which is not a number")
    if not values:
        raise ValueError(f"{path}: holds no values")
    values = np.array(values)
    if np.isinf(values).any():
        raise ValueError(f"{path}: line {_text_lines(path)[int(np.flatnonzero(np.isinf(values))[0])][0]} is "
                         "infinite; a measured value must be a finite number (nan or empty: not measured)")
    return values


def read_rows(path) -> np.ndarray:
    """The patterns shown, shape (n, pixels): ``.npy``, or text with one pattern per line (numbers separated by
    commas or by spaces; a header line and ``#`` comments are skipped). Read by numpy's C parser, whose memory is
    about the array's own (8 bytes per number). ValueError naming the file otherwise."""
    path = Path(path)
    if path.suffix == ".npy":
        rows = np.asarray(_real_npy(path), dtype=float)
    else:
        lines = _text_lines(path, first_only=True)
        if not lines:
            raise ValueError(f"{path}: holds no patterns")
        skip = lines[-1][0] - 1  # the header, comment and blank lines before the first pattern
        delimiter = "," if "," in lines[-1][1] else None
        try:
            rows = np.loadtxt(path, delimiter=delimiter, comments="#", skiprows=skip, ndmin=2, dtype=float)
        except ValueError as exc:
            raise ValueError(f"{path}: not a table of numbers ({exc})") from None
    if rows.ndim != 2:
        raise ValueError(f"{path}: expected one pattern per row; got an array of shape {rows.shape}")
    if not np.isfinite(rows).all():
        raise ValueError(f"{path}: pattern {int(np.argwhere(~np.isfinite(rows))[0, 0]) + 1} holds a value that is not "
                         "finite")
    return rows


def load_npy(path: str, option: str):
    """A ``.npy`` array (no pickles), or ValueError in one line naming ``option`` and what is wrong."""
    if not Path(path).is_file():
        raise ValueError(f"{option}: {path}: no such file")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        reason = "it holds Python objects" if "pickle" in str(exc) else str(exc).splitlines()[0]
        raise ValueError(f"{option}: {path} is not a readable .npy array ({reason})") from None


SINGLE_COIL = "single-coil here: give the replay --coils model (or --coils combine), or combine the coils first"


def _kspace_array(path: str, dataset: str, index: int | None, slice_ndim: int):
    """The shape of a k-space array in a .npy or HDF5 file, and its data: the slice ``index`` of an array of
    ``slice_ndim + 1`` axes (an HDF5 file reads that slice only), the whole of an array of at most ``slice_ndim``
    axes, else None (refused by the caller). ValueError in one line for a file that cannot be read."""
    suffix = Path(path).suffix.lower()
    if suffix not in (".npy", ".h5", ".hdf5"):
        raise ValueError(f"{path}: give a .npy or an HDF5 (.h5, .hdf5) file")
    if not Path(path).is_file():
        raise ValueError(f"{path}: no such file")
    if suffix == ".npy":
        data = load_npy(path, "kspace")
        return data.shape, data
    import h5py

    try:
        with h5py.File(path, "r") as f:
            if dataset not in f:
                raise ValueError(f"{path} has no dataset {dataset!r} (it has: {', '.join(f.keys())})")
            shape = f[dataset].shape
            if len(shape) == slice_ndim + 1 and index is not None and 0 <= index < shape[0]:
                return shape, f[dataset][index]
            return shape, (f[dataset][()] if len(shape) <= slice_ndim else None)
    except OSError as exc:
        raise ValueError(f"{path}: not a readable HDF5 file ({str(exc).splitlines()[0]})") from None


def _checked_kspace(path: str, data: np.ndarray, shape, phase_axis: int) -> np.ndarray:
    """Complex and finite, the phase encodes along the second-to-last axis (``phase_axis`` 1: the last two axes
    swapped, fastMRI's layout)."""
    if not np.iscomplexobj(data):
        raise ValueError(f"{path}: the k-space must be complex; got {data.dtype}")
    bad = int(np.count_nonzero(~np.isfinite(data)))
    if bad:
        raise ValueError(f"{path}: the k-space holds {bad} NaN or infinite samples of {data.size}; a fully sampled "
                         "k-space is needed (fill or drop what is missing first)")
    return np.ascontiguousarray(data if phase_axis == 0 else np.swapaxes(data, -1, -2))


def _slice_of(path: str, shape, data, index: int | None, layout: str, hint: str = ""):
    """Slice ``index`` of an array whose axes are ``layout`` (slices first), or the array itself when it has one
    axis fewer; ValueError in one line for a missing or out-of-range ``--slice``, or one given for no slices."""
    axes = layout.count(",") + 1
    if len(shape) == axes:
        if index is None:
            raise ValueError(f"{path}: a {axes}-D k-space {shape} is read as {layout}: give --slice (0.."
                             f"{shape[0] - 1}){hint}")
        if not 0 <= index < shape[0]:
            raise ValueError(f"{path}: --slice {index} is out of range; the k-space {shape} has slices 0.."
                             f"{shape[0] - 1}")
        return data[index] if data.ndim == axes else data  # a .npy read whole, or the HDF5 slice read alone
    if index is not None:
        raise ValueError(f"{path}: --slice given but the k-space {shape} is not {axes}-D {layout}")
    return data


def read_kspace(path: str, dataset: str = "kspace", index: int | None = None, phase_axis: int = 0):
    """A 2-D complex k-space from .npy or HDF5, with the phase encodes along axis 0; ValueError in one line for
    anything that is not one (a missing file, a dataset that is not there, a slice out of range, coils, NaN)."""
    shape, data = _kspace_array(path, dataset, index, 2)
    if len(shape) == 4:
        raise ValueError(f"{path}: a 4-D k-space {shape} is multi-coil (slices, coils, ny, nx); {SINGLE_COIL}")
    data = _slice_of(path, shape, data, index, "(slices, ny, nx)",
                     f"; a (coils, ny, nx) array is multi-coil: {SINGLE_COIL}")
    if data.ndim != 2:
        raise ValueError(f"{path}: the k-space must be 2-D (ny, nx); got shape {shape}")
    return _checked_kspace(path, data, shape, phase_axis)


def read_multicoil_kspace(path: str, dataset: str = "kspace", index: int | None = None, phase_axis: int = 0):
    """A multi-coil complex k-space, shape (coils, ny, nx) with the phase encodes along axis 1, from .npy or HDF5:
    a (coils, ny, nx) array, or slice ``index`` of a (slices, coils, ny, nx) one (fastMRI's multi-coil files:
    ``kspace`` of that shape with the phase encodes along the last axis, ``phase_axis=1``). ValueError in one line
    for anything that is not one (a single-coil array, a slice out of range or missing, NaN)."""
    shape, data = _kspace_array(path, dataset, index, 3)
    data = _slice_of(path, shape, data, index, "(slices, coils, ny, nx)")
    if len(shape) < 3 or data is None or data.ndim != 3:
        raise ValueError(f"{path}: a multi-coil k-space is (coils, ny, nx) or (slices, coils, ny, nx); got shape "
                         f"{shape} (a 2-D k-space is single-coil)")
    if shape[-3 if len(shape) == 3 else 1] < 2:
        raise ValueError(f"{path}: a k-space of one coil is single-coil; read it as (ny, nx)")
    return _checked_kspace(path, data, shape, phase_axis)
