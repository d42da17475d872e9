"""scikit-learn's estimator checks on every estimator, with its defaults (``groups=None``: one group per
coefficient). None of the checks is excluded: every one applies and passes (scikit-learn itself skips its
array-API check unless SCIPY_ARRAY_API is set). The samplers run short chains here (the
checks test the interface, not the sampling; tests/test_gibbs.py tests that against exact enumeration). Methods
that fit only basis scans (``wavelet_tree``: rows must select coefficients of its basis) or k-space lines
(``lines_gaussian``, ``lines_spike_slab``: they take lines, not rows) are not general regressors and are left out;
tests/test_wavelet_tree.py and tests/test_mri_lines.py test them against exact enumeration and dense algebra."""

import warnings

import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import check_param_validation, parametrize_with_checks

from adaptcs.models.registry import METHODS

SHORT_CHAIN = {"n_samples": 60, "burn_in": 10, "random_state": 0}
# every registered method's estimator with its defaults (samplers: short chains)
ESTIMATORS = [m.estimator(**(SHORT_CHAIN if "n_samples" in m.parameter_names() else {})) for m in METHODS.values()
              if not (m.scans_only or m.lines_only)]


@parametrize_with_checks(ESTIMATORS)
def test_scikit_learn_conventions(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # random data: fits may stop early, and say so
        check(estimator)


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_declared_parameter_constraints_are_enforced(estimator):
    """scikit-learn's check that ``_parameter_constraints`` names every parameter and that a value of a wrong
    type or out of range raises an InvalidParameterError naming it, before anything is computed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check_param_validation(type(estimator).__name__, estimator)



@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_every_estimator_fits_with_one_blas_thread(monkeypatch, estimator):
    """The package's BLAS rule (adaptcs.models._base): whatever the process allows (here 2), ``fit`` runs with one
    BLAS thread (seen where it reads its data) and the process's setting is restored; ``predict`` is under the
    same rule."""
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    from adaptcs.models._base import GroupRegressor

    def blas_threads():
        return max(p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas")

    seen = []
    prologue = GroupRegressor._fit_prologue

    def spy(self, X, y):
        seen.append(blas_threads())
        return prologue(self, X, y)

    monkeypatch.setattr(GroupRegressor, "_fit_prologue", spy)
    X = np.random.default_rng(0).normal(size=(12, 6))
    with threadpool_limits(2, user_api="blas"), warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        estimator.fit(X, X[:, 0])
        after = blas_threads()
    assert seen and set(seen) == {1} and after == 2, seen
    assert getattr(type(estimator).predict, "__wrapped_by_blas_limit__", False)


def test_warnings_point_at_the_callers_line():
    """The BLAS rule's wrapper is one more frame: a not-converged warning of fit (and of the designer's tell) must
    still name the line that called it, not the package's internals."""
    import numpy as np

    from adaptcs.design import SequentialDesigner
    from adaptcs.models import GroupARD, GroupLasso, GroupSpikeSlabEP

    X = np.random.default_rng(0).normal(size=(10, 16))
    groups = np.arange(16) // 4
    with pytest.warns(ConvergenceWarning) as record:
        GroupSpikeSlabEP(groups, p0=0.3, v0=1.0, noise_var=0.01, max_iter=2, tol=1e-14).fit(X, X[:, 0])
        GroupARD(groups, max_iter=2).fit(X, X[:, 0])
        GroupLasso(groups, k=1.0, max_iter=1, k_tol=1e-14).fit(X, X[:, 0])  # through GroupRegressor.fit
        designer = SequentialDesigner(GroupSpikeSlabEP(groups, max_iter=2), batch_size=2, rng=0)
        rows = designer.ask()
        designer.tell(rows, rows @ np.ones(16))
    assert {w.filename for w in record} == {__file__}, {(w.filename, w.lineno) for w in record}
    assert any("GroupLasso" in str(w.message) for w in record)
