"""The building blocks of the estimators' declared parameter constraints (scikit-learn's ``_parameter_constraints``,
written out in each estimator's class body).

``fit`` validates them once under scikit-learn's ``_fit_context`` (an ``InvalidParameterError``, a ValueError naming
the parameter and what it must be); each estimator's ``_check_extra`` then checks what a constraint cannot say
(one ``p0`` per group, names in ``learn``, ``alpha`` and ``k`` not both).
"""

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval

POSITIVE = [Interval(Real, 0, np.inf, closed="neither")]  # finite and > 0
POSITIVE_OR_NONE = [*POSITIVE, None]
POSITIVE_OR_ARRAY = [*POSITIVE, "array-like"]  # one value, or one per scale label (checked afterwards)
FRACTION = [Interval(Real, 0, 1, closed="right")]  # (0, 1]
PROBABILITY = [Interval(Real, 0, 1, closed="neither"), "array-like"]  # one value, or one per group
NON_NEGATIVE = [Interval(Real, 0, np.inf, closed="left")]  # finite and >= 0
COUNT = [Interval(Integral, 1, None, closed="left")]
NON_NEGATIVE_COUNT = [Interval(Integral, 0, None, closed="left")]
FOLDS = [Interval(Integral, 2, None, closed="left")]
GROUPS = [None, Interval(Integral, 1, None, closed="left"), "array-like"]
BOOLEAN = ["boolean"]
NAMES = [tuple, list, str]  # which hyper-parameters to learn: checked by name afterwards


def without_groups(constraints: dict) -> dict:
    """The constraints of an ungrouped variant (one group per coefficient: no ``groups`` parameter)."""
    return {name: rule for name, rule in constraints.items() if name != "groups"}
