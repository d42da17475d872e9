"""The synthetic experiments E1-E3 (the paper's section 5.1) as functions of (setting, replicate).

E1: 512 coefficients in 128 groups of 4, 4 groups active, 64 random rows, noise variance 1. E2: E1 with a
fraction of the group labels permuted (the same signals at every fraction, so noise levels are compared on equal
signals). E3: 32 random rows, then 32 steps of one row chosen by the strategy.
"""

from __future__ import annotations

from dataclasses import dataclass

from adaptcs.data.synthetic import EXPERIMENT_INDEX, experiment_rng, make_e1_problem, permute_group_labels
from adaptcs.experiments.case import Case
from adaptcs.models.registry import PriorInfo


@dataclass(frozen=True)
class SyntheticExperiment:
    """Parameters of a synthetic experiment (the paper's values by default)."""

    name: str
    n_initial: int
    n_steps: int = 0
    settings: tuple = ({},)
    d: int = 512
    n_groups: int = 128
    n_active: int = 4
    noise_var: float = 1.0
    layout: str = "round_robin"
    strategies: tuple = ("random",)
    figures: tuple = ("errors", "fit_times")


SYNTHETIC = {
    "E1": SyntheticExperiment("E1", n_initial=64, figures=("errors", "example", "group_probs", "fit_times")),
    "E2": SyntheticExperiment("E2", n_initial=64,
                              settings=tuple({"label_noise": f} for f in (0.1, 0.2, 0.4, 0.6, 1.0)),
                              figures=("errors",)),
    "E3": SyntheticExperiment("E3", n_initial=32, n_steps=32, strategies=("design", "random"),
                              figures=("curves", "example", "fit_times")),
}


def synthetic_case(experiment: str, setting_index: int, replicate: int, **overrides) -> Case:
    """The problem of (experiment, setting, replicate); ``overrides`` replace fields of the experiment."""
    spec = _spec(experiment, **overrides)
    if not 0 <= setting_index < len(spec.settings):
        raise ValueError(f"setting_index must be in 0..{len(spec.settings) - 1} for {experiment}; "
                         f"got {setting_index}")
    setting = spec.settings[setting_index]
    # Signals are shared across the settings of an experiment; only setting-specific noise uses the setting.
    problem_seed = (EXPERIMENT_INDEX[experiment], 0, replicate)
    problem = make_e1_problem(experiment_rng(experiment, 0, replicate), d=spec.d, n_groups=spec.n_groups,
                              n_active=spec.n_active, n=spec.n_initial, noise_var=spec.noise_var,
                              layout=spec.layout)
    fit_groups = problem.groups
    if setting.get("label_noise", 0.0) > 0.0:
        fit_groups = permute_group_labels(experiment_rng(experiment, setting_index + 1, replicate),
                                          problem.groups, setting["label_noise"])
    n_active_coefs = spec.n_active * spec.d // spec.n_groups
    prior = PriorInfo(p0_group=spec.n_active / spec.n_groups, p0_coef=n_active_coefs / spec.d,
                      v0=1.0 / 3.0, noise_var=spec.noise_var)  # Uniform[-1, 1] has variance 1/3
    design_seed = (EXPERIMENT_INDEX[experiment], setting_index, replicate, 1)
    method_seed = (EXPERIMENT_INDEX[experiment], setting_index, replicate, 2)
    return Case(problem, fit_groups, prior, problem_seed, design_seed, method_seed)


def _spec(experiment: str, **overrides) -> SyntheticExperiment:
    if experiment not in SYNTHETIC:
        raise ValueError(f"experiment must be one of {sorted(SYNTHETIC)}; got {experiment!r}")
    spec = SYNTHETIC[experiment]
    unknown = set(overrides) - set(SyntheticExperiment.__dataclass_fields__) - {"name", "settings", "figures"}
    if unknown:
        raise ValueError(f"unknown experiment parameter(s): {sorted(unknown)}")
    return SyntheticExperiment(**{**spec.__dict__, **overrides})
