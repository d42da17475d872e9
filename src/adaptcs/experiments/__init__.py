"""The experiments: E1-E3 (synthetic), E4-E6 (MNIST digits), E7 (images in a wavelet basis) and the user's own.

Data flow: an experiment kind turns (setting, replicate) into a :class:`Case` (signal, initial rows, groups,
what the methods are told); :func:`run_job` fits a method to many cases through the design loop and returns a
:class:`adaptcs.results.JobResult`. See docs/experiments.md for each experiment and the paper's numbers.
"""

from adaptcs.experiments.case import (
    UNINFORMED_P0,
    Case,
    case_estimator,
    uninformed_prior,
    uninformed_scale,
)
from adaptcs.experiments.mnist import MNIST
from adaptcs.experiments.runner import (
    check_n_steps,
    experiment_spec,
    is_user,
    problem_manifest,
    run_job,
    run_synthetic_job,
)
from adaptcs.experiments.synthetic import SYNTHETIC, synthetic_case
from adaptcs.experiments.wavelet import E7

__all__ = ["E7", "MNIST", "SYNTHETIC", "UNINFORMED_P0", "Case", "case_estimator", "check_n_steps",
           "experiment_spec", "is_user", "problem_manifest", "run_job", "run_synthetic_job", "synthetic_case",
           "uninformed_prior", "uninformed_scale"]
