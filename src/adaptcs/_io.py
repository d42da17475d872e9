"""Small file helpers shared by the results and the data modules."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path, write) -> Path:
    """Call ``write(tmp)`` on a temporary path in the same folder, then rename it to ``path``.

    On any failure (or interruption) the temporary file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
