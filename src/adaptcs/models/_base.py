"""What every estimator of the package shares: parameters validated once, the scikit-learn way, and one fit
prologue.

An estimator declares its parameters' types and ranges in ``_parameter_constraints`` (scikit-learn's
declarative validation, :mod:`adaptcs.models._constraints`); ``fit`` runs under scikit-learn's ``_fit_context``,
which checks them once; :meth:`GroupRegressor._check_extra` checks the little a declared constraint cannot say
(one ``p0`` per group, ``alpha`` and ``k`` not both, names in ``learn``). The body of ``fit`` then reads its
parameters as plain attributes. The same two checks run without data when a workflow config is checked
(:meth:`adaptcs.models.registry.Method.check_params`).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from adaptcs import _validation as val


class GroupRegressor(RegressorMixin, BaseEstimator):
    """Base of the estimators: group labels resolved, data validated, the extra parameter check, in one call."""

    def _resolve_groups(self, d: int) -> tuple[np.ndarray, np.ndarray]:
        """Sorted distinct labels (G,) and the group index of each coefficient (d,) (ungrouped variants: one group
        per coefficient)."""
        return val.check_groups(self.groups, d)

    def _check_extra(self, n_groups: int | None = None) -> None:
        """What the declared constraints cannot say; ``n_groups`` is None when checked without data. ValueError
        naming the parameter."""

    def _fit_prologue(self, X, y) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The start of every ``fit`` (after ``_fit_context`` validated the declared constraints).

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
