"""Ask/tell at an instrument from the command line: every measurement and setting in one checksummed HDF5 state file.

:mod:`adaptcs.lab.rows` is the lab of rows (``python -m adaptcs lab --instrument rows`` or ``camera``: a groups file
and free rows or a pool, or a basis and the single-pixel camera's basis images), with its state file in
:mod:`adaptcs.lab.state`; :mod:`adaptcs.lab.lines` is the lab of Cartesian k-space lines (``python -m adaptcs lab
--instrument mri``). Both write their state through :func:`adaptcs._io.write_state_file` under
:func:`adaptcs._io.locked`.
"""

from adaptcs._io import StateError

__all__ = ["StateError"]
