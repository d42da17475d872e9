"""Small file helpers shared by the results, the lab state and the data modules."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np


def same_file(a, b) -> bool:
    """Whether paths ``a`` and ``b`` name one file: the same path once resolved, or one file through a (hard or
    symbolic) link."""
    a, b = Path(a), Path(b)
    if a.resolve() == b.resolve():
        return True
    return a.exists() and b.exists() and os.path.samefile(a, b)


def refuse_overwriting_inputs(outputs: dict, inputs: dict) -> None:
    """ValueError if an output path names an input or another output (the same file, also through a link).

    Parameters
    ----------
    outputs, inputs : dict of str to path or None
        By the option that names them (``{"--out": ..., "--images": ...}``); None entries are skipped.
    """
    given_outputs = [(option, path) for option, path in outputs.items() if path is not None]
    for i, (option, path) in enumerate(given_outputs):
        for other, source in [*((o, p) for o, p in inputs.items() if p is not None), *given_outputs[:i]]:
            if same_file(path, source):
                raise ValueError(f"{path}: {option} names the file of {other}; write it to another file (nothing "
                                 "was written)")


# the formats of the files that hold a loop's measurements (adaptcs.lab, adaptcs.mri.lab)
STATE_FORMATS = ("adaptcs-design-state", "adaptcs-mri-lines-state")


def _state_format(path: Path) -> str | None:
    """The format attribute of an HDF5 lab state at ``path``, or None if it is not one."""
    try:
        import h5py

        with open(path, "rb") as handle:
            if handle.read(8) != b"\x89HDF\r\n\x1a\n":
                return None
        with h5py.File(path, "r", locking=False) as f:
            value = f.attrs.get("format", "")
    except (OSError, ValueError):
        return None
    value = value.decode() if isinstance(value, bytes) else str(value)
    return value if value in STATE_FORMATS else None


def check_output_path(path, option: str, inputs: dict | None = None) -> Path:
    """ValueError, before any work, unless ``path`` can take a new file: not a folder, not a special file (a FIFO or
    a device, which :func:`atomic_write` would replace), not a lab state file (it holds every measurement), not an
    input (``inputs``: by option, as :func:`refuse_overwriting_inputs`), and its folder is not a file."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: {option} names a folder; give a file name (nothing was written)")
    if path.exists() and not path.is_file():
        raise ValueError(f"{path}: {option} names a special file (a FIFO, a device or a socket), which would be "
                         "replaced; give a regular file (nothing was written)")
    if path.exists() and _state_format(path):
        raise ValueError(f"{path}: {option} names a lab state file, which holds every measurement of a loop; "
                         "write the output to another file (nothing was written)")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"{path}: {option}'s folder {parent} is a file (nothing was written)")
    refuse_overwriting_inputs({option: path}, inputs or {})
    return path


def atomic_write(path, write) -> Path:
    """Call ``write(tmp)`` on a temporary path in the same folder, then rename it to ``path``.

    The temporary file is flushed to disk before the rename and the folder after it, so that a crash leaves
    either the old file or the new one. A file that is replaced keeps its permission bits, and its owner and group
    as far as this process may set them (a shared lab folder). On any failure (or interruption) the temporary file
    is removed and ``path`` is left as it was.
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # never replace a folder, a FIFO or a device (as root: /dev/null)
        raise ValueError(f"{path}: not a regular file; refusing to replace it (nothing was written)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        write(tmp)
        _fsync(tmp)
        if path.exists():
            _copy_ownership(path, tmp)
        os.replace(tmp, path)
        _fsync(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def _copy_ownership(source: Path, target: Path) -> None:
    """Give ``target`` the owner, group and permission bits of ``source``: the owner only when allowed (root), the
    group when this process belongs to it; the permission bits always."""
    info = os.stat(source)
    for uid, gid in ((info.st_uid, info.st_gid), (-1, info.st_gid)):
        try:
            os.chown(target, uid, gid)
            break
        except PermissionError:
            continue
    os.chmod(target, stat.S_IMODE(info.st_mode))


def temporary_path(path: Path) -> Path:
    """Where :func:`atomic_write` writes ``path`` before the rename (one per process)."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def stale_temporaries(path: Path) -> list[Path]:
    """Temporary files of ``path`` that :func:`atomic_write` left behind (a killed process's)."""
    return sorted(path.parent.glob(f".{path.name}.tmp-*"))


def _fsync(path: Path) -> None:
    """Flush a file or a folder to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def data_digest(arrays: dict) -> str:
    """SHA-256 of every dataset's name, type, shape and bytes (HDF5's checksums cover a chunk's bytes, not which
    chunk an unchecksummed pointer leads to: this covers what was read)."""
    sha = hashlib.sha256()
    for name in sorted(arrays):
        value = np.ascontiguousarray(arrays[name])
        sha.update(f"{name}:{value.dtype.str}:{value.shape}".encode())
        sha.update(value.tobytes())
    return sha.hexdigest()


def write_checked_npz(path, arrays: dict) -> Path:
    """Write ``arrays`` (numbers and text) to an ``.npz`` at ``path`` atomically (:func:`atomic_write`), with their
    SHA-256 (:func:`data_digest`) under the key ``"_sha256"``, for :func:`read_checked_npz`."""
    arrays = {**arrays, "_sha256": np.asarray(data_digest(arrays))}

    def write(tmp):
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)

    return atomic_write(path, write)


def read_checked_npz(path) -> dict:
    """The arrays :func:`write_checked_npz` wrote; ValueError (or the error of a damaged zip) if they do not
    match their SHA-256."""
    with np.load(path, allow_pickle=False) as saved:
        arrays = {key: saved[key] for key in saved.files}
    if str(arrays.pop("_sha256", "")) != data_digest(arrays):
        raise ValueError("its SHA-256 does not match its contents")
    return arrays


def read_or_discard(path, read: Callable, *, what: str, instead: str, stacklevel: int = 2):
    """``read(path)``, or None if there is no file at ``path`` or it cannot be read: then it is removed, with a
    RuntimeWarning ``"<path>: <what> not usable (<error>); <instead>"``.

    For files that only save work (checkpoints, kept results): whatever damage a file has, doing the work again is
    always right, so any exception of ``read`` (a damaged zip, a wrong checksum, a layout check of the caller's)
    discards the file.

    Parameters
    ----------
    path : path
    read : callable
        Reads and checks the file: ``read(path) -> value``.
    what : str
        What the file holds, for the warning ("design loop checkpoint").
    instead : str
        What happens instead, for the warning ("the loop starts again from its first step").
    stacklevel : int
        The warning's, as the caller would give it to :func:`warnings.warn` (2: the caller's caller).
    """
    path = Path(path)
    if not path.exists():
        return None
    try:
        return read(path)
    except Exception as exc:
        warnings.warn(f"{path}: {what} not usable ({type(exc).__name__}: {exc}); {instead}", RuntimeWarning,
                      stacklevel=stacklevel + 1)
        path.unlink(missing_ok=True)
        return None


def is_number(text: str) -> bool:
    """Whether ``text`` reads as a float (``nan`` and ``inf`` do)."""
    try:
        float(text)
    except ValueError:
        return False
    return True


def fixed_text(text: str) -> np.bytes_:
    """``text`` as a fixed-length UTF-8 HDF5 string. A variable-length string lives in HDF5's global heap, which has
    no checksum: a flipped bit in its length can make reading spin forever. A fixed-length one is stored in the
    (checksummed, with ``libver="v110"``) object header."""
    return np.bytes_(text.encode())


def as_text(value) -> str:
    """An HDF5 string attribute as ``str`` (fixed-length ones read as bytes)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def attrs_digest(attrs, skip: str = "attrs_sha256") -> str:
    """SHA-256 of HDF5 attributes (all but ``skip``, the digest itself), in a canonical form."""
    items = {k: as_text(v) for k, v in attrs.items() if k != skip}
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()
