"""Ask/tell at an instrument from the command line: every measurement and setting in one checksummed HDF5 state file.

:mod:`adaptcs.lab.rows` is the lab of rows (``python -m adaptcs lab --instrument rows`` or ``camera``: a groups file
and free rows or a pool, or a basis and the single-pixel camera's basis images), with its state file in
:mod:`adaptcs.lab.state`; :mod:`adaptcs.lab.lines` is the lab of Cartesian k-space lines (``python -m adaptcs lab
--instrument mri``). Both write their state through :func:`adaptcs._io.write_state_file` under
:func:`adaptcs._io.locked`.
"""

import numpy as np

from adaptcs import _validation as val
from adaptcs._io import StateError

__all__ = ["StateError", "told_by_add"]


def told_by_add(added_by: np.ndarray, n_adds: int, batch, state_path, what: str) -> np.ndarray:
    """Which of the measurements in the fit add ``batch`` told (a boolean mask like ``added_by``), for ``remove``.

    StateError if there is no such add or its ``what`` (measurements, lines) were already removed; ValueError if
    ``batch`` is not a non-negative integer.
    """
    batch = val.check_count(batch, "batch", minimum=0)
    if batch >= n_adds:
        raise StateError(f"{state_path}: there is no add {batch} (adds are numbered 0..{n_adds - 1})" if n_adds
                         else f"{state_path}: nothing has been added yet")
    take = added_by == batch
    if not take.any():
        raise StateError(f"{state_path}: the {what} of add {batch} were already removed")
    return take
