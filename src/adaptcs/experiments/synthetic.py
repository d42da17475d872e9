"""The synthetic experiments E1-E3 (the paper's section 5.1) as functions of (setting, replicate).

E1: 512 coefficients in 128 groups of 4, 4 groups active, 64 random rows, noise variance 1. E2: E1 with a
fraction of the group labels permuted (the same signals at every fraction, so noise levels are compared on equal
signals). E3: 32 random rows, then 32 steps of one row chosen by the strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from adaptcs.data.synthetic import EXPERIMENT_INDEX, experiment_rng, make_e1_problem, permute_group_labels
from adaptcs.experiments.base import Experiment
from adaptcs.experiments.case import Case
from adaptcs.models.registry import PriorInfo


@dataclass(frozen=True)
class SyntheticExperiment(Experiment):
    """Parameters of a synthetic experiment (the paper's values by default)."""

    config_keys = ("settings",)

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

    @property
    def key(self) -> int:
        """Seeds its problems (E1-E3: 1-3)."""
        return EXPERIMENT_INDEX[self.name]

    def case(self, setting: int, replicate: int) -> Case:
        """The problem of (setting, replicate)."""
        self.check_setting(setting)
        # Signals are shared across the settings of an experiment; only setting-specific noise uses the setting.
        problem_seed = (self.key, 0, replicate)
        problem = make_e1_problem(experiment_rng(self.name, 0, replicate), d=self.d, n_groups=self.n_groups,
                                  n_active=self.n_active, n=self.n_initial, noise_var=self.noise_var,
                                  layout=self.layout)
        fit_groups = problem.groups
        label_noise = self.settings[setting].get("label_noise", 0.0)
        if label_noise > 0.0:
            fit_groups = permute_group_labels(experiment_rng(self.name, setting + 1, replicate), problem.groups,
                                              label_noise)
        n_active_coefs = self.n_active * self.d // self.n_groups
        prior = PriorInfo(p0_group=self.n_active / self.n_groups, p0_coef=n_active_coefs / self.d,
                          v0=1.0 / 3.0, noise_var=self.noise_var)  # Uniform[-1, 1] has variance 1/3
        design_seed = (self.key, setting, replicate, 1)
        method_seed = (self.key, setting, replicate, 2)
        return Case(problem, fit_groups, prior, problem_seed, design_seed, method_seed)


E1 = SyntheticExperiment("E1", n_initial=64, figures=("errors", "example", "group_probs", "fit_times"))
E2 = SyntheticExperiment("E2", n_initial=64, settings=tuple({"label_noise": f} for f in (0.1, 0.2, 0.4, 0.6, 1.0)),
                         figures=("errors",))
E3 = SyntheticExperiment("E3", n_initial=32, n_steps=32, strategies=("design", "random"),
                         figures=("curves", "example", "fit_times"))
SYNTHETIC = {e.name: e for e in (E1, E2, E3)}


def synthetic_case(experiment: str, setting_index: int, replicate: int, **overrides) -> Case:
    """The problem of (experiment, setting, replicate); ``overrides`` replace fields of the experiment."""
    if experiment not in SYNTHETIC:
        raise ValueError(f"experiment must be one of {sorted(SYNTHETIC)}; got {experiment!r}")
    unknown = set(overrides) - {f.name for f in fields(SyntheticExperiment)}
    if unknown:
        raise ValueError(f"unknown experiment parameter(s): {sorted(unknown)}")
    return replace(SYNTHETIC[experiment], **overrides).case(setting_index, replicate)
