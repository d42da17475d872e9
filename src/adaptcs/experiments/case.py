"""One problem of an experiment and what the methods are told about it; the estimator that fits it.

Every experiment kind (:mod:`~adaptcs.experiments.synthetic`, :mod:`~adaptcs.experiments.mnist`,
:mod:`~adaptcs.experiments.user`, :mod:`~adaptcs.experiments.wavelet`) builds :class:`Case` objects;
:mod:`~adaptcs.experiments.runner` fits them. Hyper-parameters are the paper's oracle (from the true signal) or
learned from the measurements, starting from :func:`uninformed_prior` (docs/learning.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from adaptcs.data.synthetic import GroupSparseProblem
from adaptcs.models._scaling import UNINFORMED_NOISE, UNINFORMED_P0, uninformed_scale  # noqa: F401
from adaptcs.models.registry import METHODS, PriorInfo, make_estimator


@dataclass
class Case:
    """One problem and what the methods are told about it."""

    problem: GroupSparseProblem
    fit_groups: np.ndarray  # labels given to the methods (noisy in E2)
    prior: PriorInfo
    problem_seed: tuple
    design_seed: tuple
    method_seed: tuple
    region: np.ndarray | None = None  # pixels where an image is scored (k-space lines: the brain); None: all


def case_estimator(method: str, case: Case, method_params: dict | None = None, hyperparameters: str = "oracle"):
    """The estimator of ``method`` for one case: the paper's hyper-parameters (``"oracle"``) or learned from the
    measurements starting from :func:`uninformed_prior` (``"learned"``), the user's overrides, and for
    samplers a random stream of their own derived from the case's key (never shared with the data)."""
    method_params = dict(method_params or {})
    if "random_state" in METHODS[method].parameter_names() and "random_state" not in method_params:
        method_params["random_state"] = int(np.random.SeedSequence(list(case.method_seed)).generate_state(1)[0])
    prior = case.prior if hyperparameters == "oracle" else uninformed_prior(case)
    return make_estimator(method, case.fit_groups, prior, hyperparameters=hyperparameters, **method_params)




def uninformed_prior(case: Case) -> PriorInfo:
    """Where learning starts, from the measurements alone (nothing from the true signal).

    ``p0`` is 1/2; group-specific prior knowledge (E6) keeps its per-group offsets around that level (only the
    level is learned). The noise variance starts at a tenth of ``mean(y^2)``; ``v0`` makes the prior's mean
    ``y_i^2`` equal the data's (docs/learning.md).
    """
    v0, noise_var = uninformed_scale(case.problem.X, case.problem.y)
    p0_group = case.prior.p0_group
    if np.ndim(p0_group):  # prior knowledge: its offsets around a common level of logit(1/2) = 0
        log_odds = np.log(p0_group) - np.log1p(-np.asarray(p0_group))
        p0_group = 1.0 / (1.0 + np.exp(-(log_odds - log_odds.mean())))
    else:
        p0_group = UNINFORMED_P0
    # what describes the coefficients (scales, their profile, the basis) is kept; the values are replaced
    return replace(case.prior, p0_group=p0_group, p0_coef=UNINFORMED_P0, v0=v0, noise_var=noise_var)


