"""What every estimator of the package shares: parameters validated once, the scikit-learn way, and one fit
prologue.

An estimator declares its parameters' types and ranges in ``_parameter_constraints`` (scikit-learn's
declarative validation, :mod:`adaptcs.models._constraints`); ``fit`` runs under scikit-learn's ``_fit_context``,
which checks them once; :meth:`GroupRegressor._check_extra` checks the little a declared constraint cannot say
(one ``p0`` per group, ``alpha`` and ``k`` not both, names in ``learn``). The body of ``fit`` then reads its
parameters as plain attributes. The same two checks run without data when a workflow config is checked
(:meth:`adaptcs.models.registry.Method.check_params`).

One rule for BLAS threads: every estimator's ``fit`` and ``predict`` run with one BLAS thread (an estimator with
a ``blas_threads`` parameter, GSS-EP and SS-EP, with that many; None leaves the process's setting), and so do the
design loop's ``ask`` and ``tell`` (:class:`adaptcs.design.SequentialDesigner`, with its estimator's
``blas_threads``). More threads cost up to 2-3x the CPU time of these small dense problems and, on a machine shared with
other work, wall time too (docs/log/speed.md, "BLAS threads").
"""

from __future__ import annotations

import contextlib
import functools
import numbers

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context
from threadpoolctl import ThreadpoolController

from adaptcs import _validation as val

DEFAULT_BLAS_THREADS = 1


@functools.lru_cache(maxsize=1)
def blas_controller() -> ThreadpoolController:
    """The BLAS libraries of this process, found once, at the first fit (numpy's and scipy's are loaded by then).
    Finding them inspects every loaded library, 3.3 ms with scipy and scikit-learn loaded; ``threadpool_limits``
    does that on every call, which cost a designed E3 signal (33 small fits) about a fifth of its CPU time."""
    return ThreadpoolController()


def blas_limit(threads: int | None):
    """A context in which the BLAS uses ``threads`` threads (restored afterwards); None: no limit (nor for a value
    that is not a positive integer: the estimator's parameter validation reports that one)."""
    if threads is None or isinstance(threads, bool) or not isinstance(threads, numbers.Integral) or threads < 1:
        return contextlib.nullcontext()
    return blas_controller().limit(limits=int(threads), user_api="blas")


def with_blas_limit(method, owner=lambda obj: obj):
    """``method`` run under :func:`blas_limit` of the ``blas_threads`` of ``owner(self)`` (the object itself, or
    the designer's estimator; :data:`DEFAULT_BLAS_THREADS` if it has none)."""

    @functools.wraps(method)
    def limited(self, *args, **kwargs):
        with blas_limit(getattr(owner(self), "blas_threads", DEFAULT_BLAS_THREADS)):
            return method(self, *args, **kwargs)

    limited.__wrapped_by_blas_limit__ = True
    return limited


class GroupRegressor(RegressorMixin, BaseEstimator):
    """Base of the estimators: group labels resolved, data validated, the extra parameter check, in one call;
    ``fit`` and ``predict`` of every subclass under the package's BLAS rule (module docstring)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("fit", "predict"):  # its own or inherited (a mixin's predict, say)
            method = getattr(cls, name, None)
            if callable(method) and not getattr(method, "__wrapped_by_blas_limit__", False):
                setattr(cls, name, with_blas_limit(method))

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted distinct labels (G,) and the group index of each coefficient (d,) (ungrouped variants: one group
        per coefficient)."""
        return val.check_groups(self.groups, d)

    def _check_extra(self, n_groups: int | None = None) -> None:
        """What the declared constraints cannot say; ``n_groups`` is None when checked without data. ValueError
        naming the parameter."""

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit the model to the measurements ``y`` of the rows ``X`` (what is fitted: the class's ``_fit``).

        Parameters
        ----------
        X : array-like, shape (n, d)
            Measurement rows.
        y : array-like, shape (n,)
            Measurements.

        Returns
        -------
        self
        """
        self._fit(*self._fit_prologue(X, y))
        return self

    def _fit(self, X: np.ndarray, y: np.ndarray, labels: np.ndarray, coef_group: np.ndarray) -> None:
        """The fit proper, on validated data (:meth:`_fit_prologue`'s four values); sets the fitted attributes."""
        raise NotImplementedError(f"{type(self).__name__} defines no _fit")

    def _fit_prologue(self, X, y) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The start of every ``fit`` (after ``_fit_context`` validated the declared constraints): the data
        validated, the groups resolved, the extra parameter check.

        Returns
        -------
        X : ndarray of float64, shape (n, d)
        y : ndarray of float64, shape (n,)
        labels : ndarray, shape (G,)
            The distinct group labels, sorted.
        coef_group : ndarray of intp, shape (d,)
            Group index of each coefficient.
        """
        X, y = val.check_fit_data(self, X, y)
        labels, coef_group = self._resolve_groups(X.shape[1])
        self._check_extra(labels.shape[0])
        return X, y, labels, coef_group
