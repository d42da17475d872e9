"""The experiments: E1-E3 (synthetic), E4-E6 (MNIST digits), E7 (images in a wavelet basis) and the user's own.

Data flow: an :class:`Experiment` (:mod:`~adaptcs.experiments.base`) turns (setting, replicate) into a
:class:`Case` (signal, initial rows, groups, what the methods are told) and says how the design loop measures it
(:class:`Plan`); :func:`run_job` fits a method to many cases through the loop and returns a
:class:`adaptcs.results.JobResult`. Experiments are found by name in :mod:`~adaptcs.experiments.registry`,
strategies in :mod:`~adaptcs.experiments.strategies`. See docs/experiments.md for each experiment and the paper's
numbers.
"""

from adaptcs.experiments.base import Experiment, Plan
from adaptcs.experiments.case import (
    UNINFORMED_P0,
    Case,
    case_estimator,
    uninformed_prior,
    uninformed_scale,
)
from adaptcs.experiments.registry import (
    EXPERIMENTS,
    KINDS,
    experiment_from_config,
    get_experiment,
    register_experiment,
    register_kind,
)
from adaptcs.experiments.runner import check_n_steps, problem_manifest, run_job, run_synthetic_job
from adaptcs.experiments.strategies import STRATEGIES, Strategy
from adaptcs.experiments.synthetic import synthetic_case

__all__ = ["EXPERIMENTS", "KINDS", "STRATEGIES", "UNINFORMED_P0", "Case", "Experiment", "Plan", "Strategy",
           "case_estimator", "check_n_steps", "experiment_from_config", "get_experiment", "problem_manifest",
           "register_experiment", "register_kind", "run_job", "run_synthetic_job", "synthetic_case",
           "uninformed_prior", "uninformed_scale"]
