"""The config's ``plugins``: modules of your own that register experiments, kinds or methods, imported by every
process that reads a config (the Snakefile, each job, the command line) before it reads the rest.

A module of its own so that a workflow job that only aggregates, tabulates or draws does not import the
registries (scikit-learn and the estimators: about 2 CPU s per process) when the config names no plugin.
"""

from __future__ import annotations

import importlib

_LOADED: set[str] = set()


def load_plugins(config: dict) -> None:
    """Import the config's ``plugins`` (module names) and call each one's ``register()`` once per process.

    Raises
    ------
    ValueError
        If a module cannot be imported or has no ``register()``.
    """
    for name in config.get("plugins", []):
        if name in _LOADED:
            continue
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise ValueError(f"config: plugins: cannot import {name!r} ({exc})") from None
        register = getattr(module, "register", None)
        if not callable(register):
            raise ValueError(f"config: plugins: module {name!r} has no register() function")
        register()
        _LOADED.add(name)
