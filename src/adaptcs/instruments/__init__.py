"""The instruments, one module each, and the two commands every instrument shares.

``python -m adaptcs lab --instrument NAME init|next|add|remove|estimate`` runs an instrument's ask/tell loop (after
``init`` the state file names its instrument, so ``--instrument`` may be left out); ``python -m adaptcs replay
--instrument NAME ...`` replays a complete recording. An instrument (:class:`Instrument`) is its name, its lab's
steps and state format, and its replay; :func:`register` adds one (a module of its own: the operator, the model and
the readers it uses live in the library's layers below).
"""

from __future__ import annotations

import argparse
import re

from adaptcs.instruments.base import Instrument
from adaptcs.instruments.camera import CAMERA
from adaptcs.instruments.mri import MRI
from adaptcs.instruments.rows import ROWS

INSTRUMENTS: dict[str, Instrument] = {instrument.name: instrument for instrument in (ROWS, CAMERA, MRI)}


def register(instrument: Instrument) -> None:
    """Add ``instrument`` to :data:`INSTRUMENTS` (ValueError if its name is taken)."""
    if not isinstance(instrument, Instrument):
        raise TypeError(f"register takes an Instrument; got {type(instrument).__name__}")
    if instrument.name in INSTRUMENTS:
        raise ValueError(f"an instrument named {instrument.name!r} exists already")
    INSTRUMENTS[instrument.name] = instrument


def with_lab() -> list[str]:
    """The names of the instruments that have a lab."""
    return [name for name, instrument in INSTRUMENTS.items() if instrument.add_lab_steps]


def with_replay() -> list[str]:
    """The names of the instruments that have a replay."""
    return [name for name, instrument in INSTRUMENTS.items() if instrument.add_replay_arguments]


def command_parser(command: str, name: str) -> argparse.ArgumentParser:
    """The parser of ``python -m adaptcs lab --instrument name`` (``command`` "lab": the instrument's steps as
    subcommands) or of ``python -m adaptcs replay --instrument name`` (``command`` "replay")."""
    lab = command == "lab"
    instrument = _get(name, with_lab() if lab else with_replay(), "a lab" if lab else "a replay")
    description = (instrument.lab_description if lab else instrument.replay_description) or instrument.summary
    parser = argparse.ArgumentParser(prog=f"python -m adaptcs {command} --instrument {name}", description=description)
    (instrument.add_lab_steps if lab else instrument.add_replay_arguments)(parser)
    return parser


def instrument_of_state(arguments: list[str]) -> str | None:
    """The instrument whose lab wrote the state file that ``--state`` names in ``arguments``, or None (no
    ``--state``, no such file, not a lab state)."""
    path = None
    for i, argument in enumerate(arguments):
        if argument == "--state" and i + 1 < len(arguments):
            path = arguments[i + 1]
        elif match := re.fullmatch(r"--state=(.+)", argument):
            path = match.group(1)
    if path is None:
        return None
    from adaptcs._io import state_format  # numpy: not for --help

    found = state_format(path, {INSTRUMENTS[name].state_format for name in with_lab()})
    return next((name for name in with_lab() if INSTRUMENTS[name].state_format == found), None) if found else None


def _get(name: str, offered: list[str], what: str) -> Instrument:
    if name not in offered:
        raise ValueError(f"--instrument {name}: the instruments with {what} are {', '.join(offered)}")
    return INSTRUMENTS[name]


__all__ = ["INSTRUMENTS", "Instrument", "command_parser", "instrument_of_state", "register",
           "with_lab", "with_replay"]
