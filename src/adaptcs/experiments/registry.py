"""Experiments by name: the built-in ones (E1-E7) and the kinds a config can name (``kind: user``, ``kind:
replay``, ``kind: mri``).

Adding a built-in experiment is one instance in :data:`EXPERIMENTS`; adding a kind is one class in :data:`KINDS`
(or, from a module of your own that the config lists under ``plugins``, :func:`register_experiment` and
:func:`register_kind` in its ``register()``). Nothing else in the package knows an experiment by its name.
"""

from __future__ import annotations

from adaptcs.experiments.base import Experiment
from adaptcs.experiments.mnist import MNIST
from adaptcs.experiments.mri import MRILinesExperiment
from adaptcs.experiments.scan import ReplayExperiment
from adaptcs.experiments.synthetic import SYNTHETIC
from adaptcs.experiments.user import UserExperiment
from adaptcs.experiments.wavelet import E7

EXPERIMENTS: dict[str, Experiment] = {**SYNTHETIC, **MNIST, E7.name: E7}
KINDS: dict[str, type[Experiment]] = {"user": UserExperiment, "replay": ReplayExperiment, "mri": MRILinesExperiment}


def register_experiment(experiment: Experiment) -> None:
    """Add a built-in experiment under its name (ValueError if the name is taken)."""
    if experiment.name in EXPERIMENTS:
        raise ValueError(f"an experiment named {experiment.name!r} is registered already")
    EXPERIMENTS[experiment.name] = experiment


def register_kind(kind: str, experiment_class: type[Experiment]) -> None:
    """Add an experiment kind that configs name with ``kind: <kind>`` (ValueError if the kind is taken)."""
    if kind in KINDS:
        raise ValueError(f"an experiment kind {kind!r} is registered already")
    KINDS[kind] = experiment_class


def _kind(kind) -> type[Experiment]:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}; got {kind!r}")
    return KINDS[kind]


def get_experiment(name: str, options: dict | None = None) -> Experiment:
    """The experiment ``name`` with data ``options`` as result files record them (``kind`` among them for an
    experiment of a kind); ValueError for an unknown name or a bad option."""
    options = dict(options or {})
    if "kind" in options:
        return _kind(options["kind"]).from_options(name, options)
    if name not in EXPERIMENTS:
        raise ValueError(f"experiment must be one of {sorted(EXPERIMENTS)}; got {name!r} (an experiment of your own "
                         f"needs a kind: {sorted(KINDS)})")
    return EXPERIMENTS[name].with_options(options)


def experiment_from_config(name: str, entry: dict, config: dict) -> Experiment:
    """The experiment of the config entry ``experiments.<name>``: a built-in one as the entry sets it, or one of
    the entry's ``kind``. ValueError naming the key for anything wrong."""
    if "kind" in entry:
        if name in EXPERIMENTS:
            raise ValueError(f"experiments.{name}: {name} is a built-in experiment; give an experiment of kind "
                             f"{entry['kind']!r} another name")
        try:
            cls = _kind(entry["kind"])
        except ValueError as exc:
            raise ValueError(f"experiments.{name}.{exc}") from None
        return cls.from_config(name, entry, config)
    if name not in EXPERIMENTS:
        raise ValueError(f"experiments.{name} is not one of {', '.join(EXPERIMENTS)}; an experiment of your own needs "
                         f"'kind' (one of {sorted(KINDS)}) and its data (config/README.md)")
    return EXPERIMENTS[name].configured(entry, config)
