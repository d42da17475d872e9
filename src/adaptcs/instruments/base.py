"""What an instrument is to the command line: its name, the lab steps it offers, its replay and its state file."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

StepAdder = Callable[[argparse.ArgumentParser], None]


@dataclass(frozen=True)
class Instrument:
    """One instrument of ``python -m adaptcs lab`` and ``python -m adaptcs replay``.

    Parameters
    ----------
    name : str
        What ``--instrument`` takes.
    summary : str
        One line: what is measured, for ``--help``.
    state_format : str, optional
        The ``format`` attribute of the lab state files it writes; a state file names its instrument by it, so
        steps after ``init`` need no ``--instrument``. Instruments sharing one format share their steps after
        ``init`` (the first of them in :data:`adaptcs.instruments.INSTRUMENTS` answers).
    add_lab_steps : callable, optional
        ``add_lab_steps(parser)`` adds the lab's steps (``init``, ``next``, ``add``, ``remove``, ``estimate``) as
        subcommands of ``parser``, each with ``func`` set to the function that runs it on the parsed arguments.
    add_replay_arguments : callable, optional
        ``add_replay_arguments(parser)`` adds the replay's arguments to ``parser`` and sets its ``func``.
    lab_description, replay_description : str
        What ``--help`` says of the lab and the replay (default: ``summary``).
    """

    name: str
    summary: str
    state_format: str | None = None
    add_lab_steps: StepAdder | None = None
    add_replay_arguments: StepAdder | None = None
    lab_description: str = ""
    replay_description: str = ""

    def __post_init__(self):
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"an instrument's name is a lower-case identifier; got {self.name!r}")
        if self.add_lab_steps is None and self.add_replay_arguments is None:
            raise ValueError(f"instrument {self.name!r} has neither a lab nor a replay")
        if (self.add_lab_steps is None) != (self.state_format is None):
            raise ValueError(f"instrument {self.name!r}: a lab and its state format go together")
