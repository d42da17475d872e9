"""Method names of the experiments (docs/experiments.md) mapped to estimators (:class:`Method`).

A method is made from the group labels it is told about and a :class:`PriorInfo` (what the paper gives every
method: the sparsity level, the slab variance and the noise variance), turned into the method's own
hyper-parameters as in docs/model.md section 5; the method's fixed choices and then the user's overrides go
on top. Overrides can be checked without data (:meth:`Method.check_params`), through the same check that
``fit`` runs first (each estimator's ``_check_hyperparameters``). Adding a method is one entry in
:data:`METHODS`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from adaptcs.models._ep import LEARNABLE
from adaptcs.models.empirical_bayes import LearnedPrior
from adaptcs.models.flas import FLAS, UngroupedFLAS
from adaptcs.models.gibbs import BayesianGroupLasso, GroupHorseshoe, GroupSpikeSlabGibbs
from adaptcs.models.group_ard import GroupARD
from adaptcs.models.group_lasso import GroupLasso
from adaptcs.models.matching import bg_lasso_gamma, horseshoe_tau
from adaptcs.models.spike_slab_ep import GroupSpikeSlabEP, SpikeSlabEP
from adaptcs.models.variational_garrote import UngroupedVariationalGarrote, VariationalGarrote

HYPERPARAMETERS = ("oracle", "learned")
LEARNED_PRIOR = "prior matched to GSS-EP's learned values"  # Method.learned of methods without their own learning


@dataclass(frozen=True)
class PriorInfo:
    """The prior knowledge every method is given (the paper's protocol).

    Attributes
    ----------
    p0_group : float or ndarray of shape (G,)
        Prior probability that a group is active (per group, in sorted label order, for group-specific
        prior knowledge).
    p0_coef : float
        Prior probability that a single coefficient is non-zero (for ungrouped methods).
    v0 : float
        Variance of the non-zero coefficients.
    noise_var : float
        Noise variance.
    """

    p0_group: float | np.ndarray
    p0_coef: float
    v0: float
    noise_var: float


PER_PROBLEM = "from each problem's prior knowledge"
# Stand-ins for a problem when only the parameters are checked (no data, no fit).
_PLACEHOLDER_GROUPS = np.zeros(4, dtype=np.int64)
_PLACEHOLDER_PRIOR = PriorInfo(p0_group=0.5, p0_coef=0.5, v0=1.0, noise_var=1.0)


@dataclass(frozen=True)
class Method:
    """A method of the experiments: its estimator, the hyper-parameters it derives per problem from the prior
    knowledge, the choices fixed for it (the user's ``method_params`` go on top of both), and how it runs
    without an oracle.

    Calling it with ``(groups, prior, **overrides)`` makes the estimator.

    ``learned`` is what the method does with ``hyperparameters="learned"`` (:func:`make_estimator`): parameters
    that make it learn from the data (e.g. ``{"learn": ("noise_var",)}``), or :data:`LEARNED_PRIOR` for a
    method whose prior is matched to GSS-EP's learned values (:class:`~adaptcs.models.empirical_bayes.
    LearnedPrior`).
    """

    estimator: type
    from_prior: Callable[[np.ndarray, PriorInfo], dict]
    fixed: dict = field(default_factory=dict)
    grouped: bool = True
    learned: dict | str = field(default_factory=dict)

    def __call__(self, groups, prior: PriorInfo, **overrides):
        params = self.from_prior(groups, prior) | self.fixed | overrides
        return self.estimator(groups, **params) if self.grouped else self.estimator(**params)

    def parameter_names(self) -> list[str]:
        """The estimator parameters a user may set (all but the group labels, which come with the data)."""
        return [name for name in self.estimator._get_param_names() if name != "groups"]

    def effective_params(self, overrides: dict) -> dict:
        """Every parameter as a run with ``overrides`` uses it: the user's value, else the value fixed for the
        method, else ``PER_PROBLEM`` for those derived from each problem's prior knowledge, else the default."""
        defaults = {name: p.default for name, p in inspect.signature(self.estimator).parameters.items()}
        per_problem = set(self.from_prior(_PLACEHOLDER_GROUPS, _PLACEHOLDER_PRIOR))
        out = {}
        for name in self.parameter_names():
            if name in overrides:
                out[name] = overrides[name]
            elif name in self.fixed:
                out[name] = self.fixed[name]
            else:
                out[name] = PER_PROBLEM if name in per_problem else defaults[name]
        return out

    def check_params(self, overrides: dict) -> None:
        """Refuse unknown or invalid ``overrides`` without data (ValueError naming the parameter)."""
        known = self.parameter_names()
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ValueError(f"unknown parameter(s) {unknown}; {self.estimator.__name__} takes {known}")
        self(_PLACEHOLDER_GROUPS, _PLACEHOLDER_PRIOR, **overrides)._check_hyperparameters()


def _spike_slab(groups, prior: PriorInfo) -> dict:
    return {"p0": prior.p0_group, "v0": prior.v0, "noise_var": prior.noise_var}


def _ungrouped_spike_slab(groups, prior: PriorInfo) -> dict:
    return {"p0": prior.p0_coef, "v0": prior.v0, "noise_var": prior.noise_var}


def _noise_only(groups, prior: PriorInfo) -> dict:
    return {"noise_var": prior.noise_var}


def _nothing(groups, prior: PriorInfo) -> dict:
    return {}  # group lasso is the one method not told the noise level


def _horseshoe(groups, prior: PriorInfo) -> dict:
    tau = horseshoe_tau(float(np.mean(prior.p0_group)), prior.v0)  # matched to the GSS marginal of a coefficient
    return {"tau": tau, "noise_var": prior.noise_var}


def _bayesian_group_lasso(groups, prior: PriorInfo) -> dict:
    group_size = int(np.median(np.unique(np.asarray(groups), return_counts=True)[1]))
    return {"gamma": bg_lasso_gamma(float(np.mean(prior.p0_group)), prior.v0, group_size),
            "noise_var": prior.noise_var}


_LEARN_ALL = {"learn": LEARNABLE}  # type-II maximum likelihood of p0, v0 and the noise variance

METHODS: dict[str, Method] = {
    "gss_ep": Method(GroupSpikeSlabEP, _spike_slab, learned=_LEARN_ALL),
    "ss_ep": Method(SpikeSlabEP, _ungrouped_spike_slab, grouped=False, learned=_LEARN_ALL),
    "g_ard": Method(GroupARD, _noise_only, learned={"learn": ("noise_var",)}),
    # The paper's constrained form with k = 8, the best of the values it tried on E1; without an oracle, the
    # penalty is chosen by 5-fold cross-validation.
    "g_lasso": Method(GroupLasso, _nothing, fixed={"k": 8.0}, learned={"k": "cv"}),
    "gss_mcmc": Method(GroupSpikeSlabGibbs, _spike_slab, learned=LEARNED_PRIOR),
    "g_hs": Method(GroupHorseshoe, _horseshoe, learned=LEARNED_PRIOR),
    "bg_lasso": Method(BayesianGroupLasso, _bayesian_group_lasso, learned=LEARNED_PRIOR),
    # The seed baselines. VG (variational garrote) has no posterior covariance over w, so it runs with random rows
    # only (the workflow gives methods without cov_matvec no "design" runs); gamma is matched to the spike-and-slab
    # prior (p0, v0, noise). FLAS (MAP + exact Laplace covariance) designs rows from its Laplace covariance.
    "vg": Method(VariationalGarrote, _spike_slab, learned=LEARNED_PRIOR),
    "vg_ungrouped": Method(UngroupedVariationalGarrote, _ungrouped_spike_slab, grouped=False, learned=LEARNED_PRIOR),
    "flas": Method(FLAS, _spike_slab, learned=LEARNED_PRIOR),
    "flas_ungrouped": Method(UngroupedFLAS, _ungrouped_spike_slab, grouped=False, learned=LEARNED_PRIOR),
}


def variant_label(method: str, hyperparameters: str) -> str:
    """How results name a method run with ``hyperparameters``: ``gss_ep`` (oracle), ``gss_ep+learned``."""
    return method if hyperparameters == "oracle" else f"{method}+{hyperparameters}"


def base_method(label: str) -> str:
    """The method of a :func:`variant_label`."""
    return label.split("+", 1)[0]


def make_estimator(method: str, groups, prior: PriorInfo, *, hyperparameters: str = "oracle", **overrides):
    """A fresh estimator for ``method`` with the paper's hyper-parameters (and ``overrides`` on top).

    Parameters
    ----------
    method : str
        A key of :data:`METHODS`.
    groups : array-like, shape (d,)
        Group labels the method is told (possibly noisy, as in E2).
    prior : PriorInfo
        The paper's prior knowledge with ``hyperparameters="oracle"``; the starting point of the learning
        with ``"learned"`` (which must then not come from the true signal).
    hyperparameters : {"oracle", "learned"}
        "learned": the method learns from the data what the oracle would give it (:attr:`Method.learned`).
    **overrides
        Estimator parameters that replace the derived ones (e.g. ``tol``, ``max_iter``).
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}; got {method!r}")
    if hyperparameters not in HYPERPARAMETERS:
        raise ValueError(f"hyperparameters must be one of {HYPERPARAMETERS}; got {hyperparameters!r}")
    spec = METHODS[method]
    if hyperparameters == "oracle":
        return spec(groups, prior, **overrides)
    if spec.learned == LEARNED_PRIOR:
        return LearnedPrior(spec, groups, prior, overrides)
    return spec(groups, prior, **(spec.learned | overrides))
