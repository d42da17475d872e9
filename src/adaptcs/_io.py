"""Small file helpers shared by the results, the lab state and the data modules."""

from __future__ import annotations

import hashlib
import json
import os
import stat
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


def atomic_write(path, write) -> Path:
    """Call ``write(tmp)`` on a temporary path in the same folder, then rename it to ``path``.

    The temporary file is flushed to disk before the rename and the folder after it, so that a crash leaves
    either the old file or the new one. A file that is replaced keeps its permission bits. On any failure (or
    interruption) the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        write(tmp)
        _fsync(tmp)
        if path.exists():
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        os.replace(tmp, path)
        _fsync(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


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


def attrs_digest(attrs, skip: str = "attrs_sha256") -> str:
    """SHA-256 of HDF5 attributes (all but ``skip``, the digest itself), in a canonical form."""
    items = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in attrs.items() if k != skip}
    return hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()
