"""A method whose prior is matched to the GSS prior learned from the same measurements (no oracle).

The paper gives the samplers (GSS Gibbs, group horseshoe, Bayesian group lasso) the oracle's p0, v0 and noise
variance, matched to each prior's own parameters (:mod:`adaptcs.models.matching`). Without an oracle, the same
matching starts from the values GSS-EP learns by type-II maximum likelihood on the data the method is fitted
to: :class:`LearnedPrior` fits that GSS-EP first, then the method with the prior matched to its ``p0_``,
``v0_`` and ``noise_var_``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from adaptcs.models._ep import LEARNABLE
from adaptcs.models.spike_slab_ep import GroupSpikeSlabEP


class LearnedPrior(RegressorMixin, BaseEstimator):
    """Fit GSS-EP with learned ``p0``, ``v0`` and ``noise_var``, then ``method`` with the prior they give.

    Parameters
    ----------
    method : adaptcs.models.registry.Method
        Makes the estimator from ``(groups, prior, **params)``.
    groups : array-like of shape (d,)
        Group label of each coefficient.
    prior : adaptcs.models.registry.PriorInfo
        Starting point of the learning (not the oracle's values: see
        :func:`adaptcs.experiments.uninformed_prior`).
    params : dict, optional
        Further parameters of the method's estimator (e.g. ``n_samples``, ``random_state``).
    warm_start : bool
        Refits track the learned values from the last fit (GSS-EP's warm-started learning, as in its own design
        loops) instead of learning them from scratch; the method itself is refitted with the new prior.

    Attributes
    ----------
    prior_fit_ : GroupSpikeSlabEP
        The GSS-EP fit the prior was learned by.
    estimator_ : estimator
        The method fitted with the matched prior.
    p0_, v0_, noise_var_ : float
        The learned values (``p0_`` the mean prior probability of a group).
    coef_ : ndarray of shape (d,)
    group_prob_ : ndarray of shape (G,)
        Where the method has it.
    n_iter_ : int
        The method's iterations (sweeps for samplers).
    converged_ : bool
        Both the learning and the method converged.

    Examples
    --------
    >>> import numpy as np
    >>> from adaptcs.models.registry import METHODS, PriorInfo
    >>> rng = np.random.default_rng(0)
    >>> groups = np.repeat(np.arange(8), 4)
    >>> w = np.where(groups < 2, rng.normal(size=32), 0.0)
    >>> X = rng.normal(size=(24, 32))
    >>> y = X @ w + 0.1 * rng.normal(size=24)
    >>> start = PriorInfo(p0_group=0.5, p0_coef=0.5, v0=1.0, noise_var=0.1 * np.mean(y**2))
    >>> est = LearnedPrior(METHODS["gss_mcmc"], groups, start, {"n_samples": 300, "burn_in": 100,
    ...                                                          "random_state": 0}).fit(X, y)
    >>> bool(est.p0_ < 0.5)
    True
    """

    def __init__(self, method, groups, prior, params=None, warm_start=False):
        self.method = method
        self.groups = groups
        self.prior = prior
        self.params = params
        self.warm_start = warm_start

    def fit(self, X, y):
        """Fit GSS-EP with learned hyper-parameters, then the method with its prior matched to them."""
        prior = self.prior
        gss = getattr(self, "prior_fit_", None) if self.warm_start else None
        if gss is None or gss.n_features_in_ != np.shape(X)[1]:
            gss = GroupSpikeSlabEP(self.groups, p0=prior.p0_group, v0=prior.v0, noise_var=prior.noise_var,
                                   learn=LEARNABLE, warm_start=bool(self.warm_start))
        gss.fit(X, y)
        # an ungrouped method's p0 is the probability of a coefficient, that of its group under the GSS prior
        learned = replace(prior, p0_group=gss.p0_, p0_coef=float(np.mean(gss.p0_)), v0=gss.v0_,
                          noise_var=gss.noise_var_)
        estimator = self.method(self.groups, learned, **dict(self.params or {})).fit(X, y)
        self.prior_fit_ = gss
        self.estimator_ = estimator
        self.p0_ = float(np.mean(gss.p0_))
        self.v0_ = gss.v0_
        self.noise_var_ = gss.noise_var_
        self.n_features_in_ = estimator.n_features_in_
        self.coef_ = estimator.coef_
        if hasattr(estimator, "group_prob_"):
            self.group_prob_ = estimator.group_prob_
        self.n_iter_ = getattr(estimator, "n_iter_", None)
        self.converged_ = bool(gss.converged_ and getattr(estimator, "converged_", True))
        return self

    @property
    def cov_matvec(self):
        """The method's posterior covariance operator, when it has one (else AttributeError: random rows only)."""
        if not hasattr(self.method.estimator, "cov_matvec"):
            raise AttributeError(f"{self.method.estimator.__name__} has no posterior covariance")
        return self._cov_matvec

    def _cov_matvec(self, v):
        return self.estimator_.cov_matvec(v)

    def predict(self, X, return_std: bool = False):
        """The method's prediction (and predictive standard deviation, where it has one)."""
        if return_std:
            return self.estimator_.predict(X, return_std=True)
        return self.estimator_.predict(X)
