"""The experiments: E1-E3 (synthetic), E4-E6 (MNIST digits), E7 (images in a wavelet basis) and the user's own.

Data flow: an :class:`Experiment` (:mod:`~adaptcs.experiments.base`) turns (setting, replicate) into a
:class:`Case` (signal, initial rows, groups, what the methods are told) and says how the design loop measures it
(:class:`Plan`); :func:`run_job` fits a method to many cases through the loop and returns a
:class:`adaptcs.results.JobResult`. Experiments are found by name in :mod:`~adaptcs.experiments.registry`,
strategies in :mod:`~adaptcs.experiments.strategies`. See docs/experiments.md for each experiment and the paper's
numbers.
"""

import importlib

# Each name and the submodule that defines it. They are imported on first use (PEP 562), so that importing one
# light submodule (``adaptcs.experiments.strategies``, which figures read) does not import every experiment, the
# estimators and scikit-learn (about 2 CPU s per process).
_WHERE = {"Experiment": "base", "Plan": "base", "UNINFORMED_P0": "case", "Case": "case", "case_estimator": "case",
          "uninformed_prior": "case", "uninformed_scale": "case", "EXPERIMENTS": "registry", "KINDS": "registry",
          "experiment_from_config": "registry", "get_experiment": "registry", "register_experiment": "registry",
          "register_kind": "registry", "check_n_steps": "runner", "problem_manifest": "runner", "run_job": "runner",
          "run_synthetic_job": "runner", "STRATEGIES": "strategies", "Strategy": "strategies",
          "synthetic_case": "synthetic"}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    """The public name ``name``, imported from its submodule on first use (then an ordinary attribute)."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
