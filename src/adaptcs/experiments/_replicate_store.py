"""Finished replicates of a job, kept while the job runs, so that a job killed part-way loses only the replicate
it was in.

Each replicate's :class:`~adaptcs.design.simulation.SequentialDesignResult` is written atomically to one ``.npz``
file in the job's checkpoint folder as soon as it is done. Its name is a digest of the job (experiment, setting,
method, hyper-parameters, strategy, steps, options), the replicate, its problem's arrays (signal, groups, initial
rows and values) and the code of the whole ``adaptcs`` package,
so a run of the same job with the same code reads it instead of running the replicate again, and anything else
never does. A file that cannot be read (damaged, or of another layout) is removed with a warning and the replicate
runs again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import warnings
from dataclasses import fields
from pathlib import Path

import numpy as np

from adaptcs._io import data_digest, read_checked_npz, read_or_discard, write_checked_npz
from adaptcs.design.simulation import SequentialDesignResult

log = logging.getLogger(__name__)

FORMAT = 1


@functools.cache
def _package_digest() -> str:
    """SHA-256 of every Python file of the installed ``adaptcs`` package (its code decides every number)."""
    root = Path(__file__).resolve().parents[1]
    sha = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        sha.update(str(path.relative_to(root)).encode())
        sha.update(path.read_bytes())
    return sha.hexdigest()


def replicate_path(folder, job: dict, replicate: int, data: dict) -> Path:
    """The file of ``replicate`` of the job described by ``job`` (plain data: its identity and options), whose
    problem holds the arrays ``data`` (so that a data file changed between two runs is never mixed in)."""
    identity = json.dumps({"job": job, "replicate": int(replicate), "format": FORMAT, "code": _package_digest(),
                           "numpy": np.__version__, "data": data_digest(data)}, sort_keys=True, default=str)
    return Path(folder) / f"replicate{int(replicate)}-{hashlib.sha256(identity.encode()).hexdigest()[:24]}.npz"


def save_replicate(path, result: SequentialDesignResult) -> None:
    """Write ``result`` to ``path`` atomically. Keeping it is a convenience: a full or read-only disk (or a value
    that cannot be written) only warns, and the job goes on."""
    arrays, kinds = {}, {}
    try:
        for f in fields(result):
            value = getattr(result, f.name)
            if value is None:
                kinds[f.name] = "none"
            elif isinstance(value, str):
                kinds[f.name], arrays[f.name] = "str", np.asarray(value)
            elif isinstance(value, dict):
                kinds[f.name] = "json"
                arrays[f.name] = np.asarray(json.dumps({k: float(v) for k, v in value.items()}))
            else:
                kinds[f.name], arrays[f.name] = "array", np.asarray(value)
        arrays["_kinds"] = np.asarray(json.dumps(kinds, sort_keys=True))
        write_checked_npz(path, arrays)
    except (OSError, TypeError, ValueError) as exc:
        warnings.warn(f"{path}: cannot keep the finished replicate ({exc}); the job goes on without it",
                      RuntimeWarning, stacklevel=2)


def load_replicate(path) -> SequentialDesignResult | None:
    """The result saved at ``path``, or None if there is none or it cannot be read (then it is removed)."""
    return read_or_discard(path, _read_replicate, what="finished replicate", instead="running it again")


def _read_replicate(path) -> SequentialDesignResult:
    arrays = read_checked_npz(path)
    kinds = json.loads(str(arrays.pop("_kinds")))
    if set(kinds) != {f.name for f in fields(SequentialDesignResult)}:
        raise ValueError("its fields are not those of a replicate's result")
    values = {}
    for name, kind in kinds.items():
        if kind == "none":
            values[name] = None
        elif kind == "str":
            values[name] = str(arrays[name])
        elif kind == "json":
            values[name] = json.loads(str(arrays[name]))
        else:
            values[name] = arrays[name]
    return SequentialDesignResult(**values)
