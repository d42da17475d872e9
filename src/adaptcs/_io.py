"""Files written so that nothing is lost: atomic writes (a temporary file, flushed, then renamed), checksums (SHA-256
of arrays and attributes; checked ``.npz``; the labs' checksummed HDF5 state files), exclusive locks for a
read-modify-write, and the checks that no output overwrites an input. Below everything else in the package; the
readers of what users give are in :mod:`adaptcs.readers`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import json
import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from adaptcs._names import LINE_LAB_FORMAT, ROW_LAB_FORMAT


class StateError(ValueError):
    """A state or input file that cannot be used (the message says which and why)."""


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


# the formats of the files that hold a loop's measurements (adaptcs.lab.state, adaptcs.lab.lines)
STATE_FORMATS = (ROW_LAB_FORMAT, LINE_LAB_FORMAT)


def state_format(path, formats=STATE_FORMATS) -> str | None:
    """The format attribute of an HDF5 lab state at ``path`` if it is one of ``formats``, or None (also for what is
    not a regular file: opening a FIFO would block)."""
    if not Path(path).is_file():
        return None
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
    return value if value in formats else None


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
    if path.exists() and state_format(path):
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




def write_numbers(path, array: np.ndarray) -> Path:
    """Numbers with full precision (17 significant digits: they read back exactly), atomically."""
    return atomic_write(path, lambda tmp: np.savetxt(tmp, np.atleast_2d(array), delimiter=",", fmt="%.17g"))


@contextlib.contextmanager
def locked(path, *, made_by: str, creating: bool = False):
    """An exclusive lock on ``path`` (through a ``.lock`` file next to it) for a read-modify-write; temporary
    files that a killed command left next to ``path`` are removed once the lock is held.

    The state must exist and be a regular file (``creating``: its folder must exist, and the state, if there is
    one, must be a regular file) before the lock file is touched. The lock file is opened without following a
    link and without truncating: one planted in a shared folder (a link to another file, a FIFO) is refused and
    never written to.
    """
    path = Path(path)
    if creating:
        if not path.parent.is_dir():
            raise StateError(f"{path}: the folder {path.parent} does not exist")
        if path.exists():
            check_regular_file(path, made_by)
    else:
        check_regular_file(path, made_by)
    lock_path = path.with_name(f".{path.name}.lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise StateError(f"{lock_path}: cannot open the state's lock file ({exc.strerror}); "
                         + ("it is a link, which a lock file must not be: remove it"
                            if exc.errno == errno.ELOOP else "check the folder's permissions")) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise StateError(f"{lock_path}: the state's lock file is not a regular file; remove it")
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            for stale in stale_temporaries(path):
                stale.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def check_regular_file(path: Path, made_by: str) -> None:
    """StateError unless ``path`` is an existing regular file (a FIFO or a device would block or never end a
    read; a folder is not a state); ``made_by`` is the command that makes such a state."""
    if not path.exists():
        raise StateError(f"{path}: no such state file (make one with '{made_by}')")
    if not path.is_file():
        raise StateError(f"{path}: not a regular file; a state file is an HDF5 file '{made_by}' made")


def refuse_state_as_output(state_path, out_path, option: str) -> None:
    """StateError if ``out_path`` is the state file (the same path, or the same file through a link)."""
    if out_path is None:
        return
    if same_file(out_path, state_path):
        raise StateError(f"{out_path}: {option} names the state file {state_path}, which holds every measurement; "
                         "write the output to another file")


def write_state_file(path, attrs: dict, arrays: dict) -> Path:
    """Write a checksummed HDF5 state to a new file, flush it, and rename it over ``path`` (also the line loop's,
    :mod:`adaptcs.lab.lines`).

    Text attributes are fixed-length strings (never in the unchecksummed global heap, see ``fixed_text``), every
    dataset carries Fletcher-32 (which needs chunked storage, so at least one element), and ``data_sha256`` /
    ``attrs_sha256`` cover the datasets and the other attributes. StateError if it cannot be written; the old file is
    then untouched.
    """
    import h5py

    buffer = io.BytesIO()
    with h5py.File(buffer, "w", libver=("v110", "latest")) as f:  # v110: checksummed object headers
        for name, value in attrs.items():
            f.attrs[name] = fixed_text(value) if isinstance(value, str) else value
        for name, value in arrays.items():
            f.create_dataset(name, data=value, fletcher32=value.size > 0)
        f.attrs["data_sha256"] = fixed_text(data_digest(arrays))
        f.attrs["attrs_sha256"] = fixed_text(attrs_digest(f.attrs))
    data = buffer.getvalue()

    def write(tmp):
        with open(tmp, "wb") as handle:
            handle.write(data)

    try:
        return atomic_write(path, write)
    except OSError as exc:  # a full disk, a file-size limit: the old state is untouched
        raise StateError(f"{path}: cannot write the state ({exc.strerror or exc}); the state file is unchanged and "
                         "nothing was recorded") from None
