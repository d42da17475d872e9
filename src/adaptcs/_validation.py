"""Input checks shared by the estimators, the design loop and the data loaders.

Every check raises ``ValueError`` naming the offending argument; nothing is silently coerced
(no clipping, no casting of labels, no dropping of rows).
"""

from __future__ import annotations

import numbers

import numpy as np
from sklearn.utils.validation import validate_data


def check_design(X, y) -> tuple[np.ndarray, np.ndarray]:
    """Validate a design matrix and its targets.

    Parameters
    ----------
    X : array-like, shape (n, d)
        Measurement rows.
    y : array-like, shape (n,)
        Measurements.

    Returns
    -------
    X : ndarray of float64, shape (n, d), C-contiguous
    y : ndarray of float64, shape (n,)
    """
    X = _as_float_array(X, "X")
    y = _as_float_array(y, "y")
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array of shape (n, d); got {X.ndim} dimension(s)")
    if y.ndim != 1:
        raise ValueError(f"y must be a 1-D array of shape (n,); got shape {y.shape}")
    n, d = X.shape
    if n == 0 or d == 0:
        raise ValueError(f"X must have at least one row and one column; got shape {X.shape}")
    if y.shape[0] != n:
        raise ValueError(f"y has {y.shape[0]} entries but X has {n} rows")
    return np.ascontiguousarray(X), y


# Measurements beyond MAX_MAGNITUDE cannot be squared and summed over a row in double precision; a new row or value
# MAX_SCALE_JUMP times larger than everything told before is a unit or typing error, not a measurement.
MAX_MAGNITUDE = 1e150
MAX_SCALE_JUMP = 1e10


def check_measurement_scale(X_new: np.ndarray, y_new: np.ndarray, X_old=None, y_old=None) -> None:
    """Refuse rows or values no fit can use: entries above :data:`MAX_MAGNITUDE`, or :data:`MAX_SCALE_JUMP` times
    larger than the largest told before (``X_old``, ``y_old``; none: only the first check).

    Parameters
    ----------
    X_new : ndarray, shape (k, d)
    y_new : ndarray, shape (k,)
    X_old : ndarray, shape (n, d), optional
    y_old : ndarray, shape (n,), optional
    """
    for name, new, old in (("row entry", X_new, X_old), ("measured value", y_new, y_old)):
        largest = float(np.max(np.abs(new), initial=0.0))
        if largest > MAX_MAGNITUDE:
            raise ValueError(f"a {name} of {largest:.3g} is refused: beyond {MAX_MAGNITUDE:.0e}, its square "
                             "overflows double precision; nothing was changed")
        before = 0.0 if old is None else float(np.max(np.abs(old), initial=0.0))
        if before > 0.0 and largest > MAX_SCALE_JUMP * before:
            raise ValueError(f"a {name} of {largest:.3g} is refused: {largest / before:.3g} times the largest told "
                             f"so far ({before:.3g}), a unit or typing error rather than a measurement; nothing was "
                             "changed")


def check_fit_data(estimator, X, y) -> tuple[np.ndarray, np.ndarray]:
    """Validate the data of ``estimator.fit`` with scikit-learn's ``validate_data`` (its messages; sets
    ``n_features_in_``): dense, finite, float64, y 1-D (a single column is raveled with a DataConversionWarning).

    Returns
    -------
    X : ndarray of float64, shape (n, d), C-contiguous
    y : ndarray of float64, shape (n,)
    """
    for value, name in ((X, "X"), (y, "y")):  # text: say so (scikit-learn would try to parse it as numbers)
        dtype = getattr(value, "dtype", None)
        if isinstance(dtype, np.dtype) and dtype.kind in "US":
            raise ValueError(f"{name} must be numeric; got dtype {dtype}")
    X, y = validate_data(estimator, X, y, accept_sparse=False, dtype=np.float64, order="C", y_numeric=True)
    y = np.asarray(y, dtype=np.float64)
    if X.size and not np.any(X):
        raise ValueError(f"{type(estimator).__name__}: every entry of X is zero: the measurements carry no "
                         "information about the coefficients")
    return X, y


def check_squares_fit(estimator, X, y) -> None:
    """ValueError unless every entry of X and y is below :data:`MAX_MAGNITUDE` (for estimators that do not rescale
    the data to unit size: beyond it a square overflows double precision)."""
    for value, name in ((X, "X"), (y, "y")):
        largest = float(np.max(np.abs(value), initial=0.0))
        if largest > MAX_MAGNITUDE:
            raise ValueError(f"{type(estimator).__name__}: {name} holds a value of {largest:.3g}; beyond "
                             f"{MAX_MAGNITUDE:.0e} its square overflows double precision: rescale the data")


def check_predict_rows(estimator, X) -> np.ndarray:
    """Validate rows to predict at against the fitted ``estimator`` (2-D, as many columns as in fit)."""
    return validate_data(estimator, X, reset=False, accept_sparse=False, dtype=np.float64)


def check_rows(X, d: int, name: str = "X") -> np.ndarray:
    """Validate rows to predict at: shape (k, d), finite. A single row of shape (d,) is accepted."""
    X = _as_float_array(X, name)
    if X.ndim == 1:
        X = X[None, :]
    if X.ndim != 2 or X.shape[1] != d:
        raise ValueError(f"{name} must have shape (k, {d}) (d as in fit); got {X.shape}")
    return X


def check_vector_or_block(v, d: int, name: str = "v") -> np.ndarray:
    """Validate an operand of shape (d,) or (d, k)."""
    v = _as_float_array(v, name)
    if v.ndim not in (1, 2) or v.shape[0] != d:
        raise ValueError(f"{name} must have shape ({d},) or ({d}, k); got {v.shape}")
    return v


def check_groups(groups, d: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Map group labels to 0..G-1 in sorted label order.

    Parameters
    ----------
    groups : None, int or array-like of shape (d,)
        None: one group per coefficient (needs ``d``). An int k: contiguous groups of k coefficients
        (coefficients 0..k-1 form group 0, and so on; k must divide ``d``). Otherwise one label per coefficient:
        integers or strings (a list, numpy array or pandas Series; any one kind of sortable labels).
    d : int, optional
        Expected number of coefficients (the number of columns of X).

    Returns
    -------
    labels : ndarray, shape (G,)
        The distinct labels, sorted; group g is ``labels[g]``.
    index : ndarray of intp, shape (d,)
        Group index of each coefficient.
    """
    if groups is None or (isinstance(groups, numbers.Integral) and not isinstance(groups, bool)):
        if d is None:
            raise ValueError("groups must be labels (one per coefficient) when the number of coefficients is not "
                             "known yet")
        size = 1 if groups is None else int(groups)
        if size < 1 or d % size:
            raise ValueError(f"groups={groups}: contiguous groups of {size} coefficients must divide the {d} columns "
                             "of X")
        index = np.arange(d, dtype=np.intp) // size
        return np.arange(d // size), index
    _check_label_kinds(groups)
    arr = np.asarray(groups)
    if arr.dtype == object and arr.ndim == 1 and arr.size:  # e.g. a pandas Series of strings: one kind (checked)
        kind = _label_kind(arr[0])
        if kind == "string":
            arr = arr.astype(str)
        elif kind == "number":
            arr = arr.astype(float)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"groups must be a non-empty 1-D array of labels; got shape {arr.shape}")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise ValueError("groups must hold integer (or string) labels; got non-integral floats")
    elif arr.dtype.kind not in "iuUSb":
        raise ValueError(f"groups must hold integer or string labels; got dtype {arr.dtype}")
    if d is not None and arr.shape[0] != d:
        raise ValueError(f"groups has {arr.shape[0]} labels but X has {d} columns")
    labels, index = np.unique(arr, return_inverse=True)
    return labels, index.astype(np.intp).ravel()


def _label_kind(label) -> str:
    if isinstance(label, (bool, np.bool_)):
        return "boolean"
    if isinstance(label, (str, bytes, np.str_, np.bytes_)):
        return "string"
    if isinstance(label, (numbers.Number, np.number)):
        return "number"
    return type(label).__name__


def _check_label_kinds(groups) -> None:
    """Refuse labels of mixed kinds (``[1, "1", 2]``): numpy would turn them into strings and merge 1 with "1"."""
    if isinstance(groups, np.ndarray) and groups.dtype != object:
        return  # one dtype: one kind
    try:
        kinds = {_label_kind(label) for label in groups}
    except TypeError:
        return  # not iterable: the shape check reports it
    if len(kinds) > 1:
        raise ValueError(f"groups mixes labels of different kinds ({', '.join(sorted(kinds))}); use one kind, "
                         "e.g. all integers or all strings")


def group_members(coef_group: np.ndarray, n_groups: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """Coefficients sorted by group (stable), and the coefficient indices of each group.

    Returns
    -------
    order : ndarray of intp, shape (d,)
        Coefficient indices with each group's contiguous.
    members : list of G ndarrays
        ``members[g]`` are the coefficients of group g, in increasing order.
    """
    order = np.argsort(coef_group, kind="stable")
    return order, np.split(order, np.cumsum(np.bincount(coef_group, minlength=n_groups))[:-1])


def check_probability(p, n_groups: int | None, name: str = "p0") -> np.ndarray:
    """Validate a prior probability: a scalar or one value per group, each strictly inside (0, 1).

    Returns
    -------
    ndarray of float64, shape (n_groups,)
        As given (a scalar or a vector of any length) when ``n_groups`` is None.
    """
    arr = _as_float_array(p, name)
    if n_groups is None:
        if arr.ndim > 1:
            raise ValueError(f"{name} must be a scalar or have one value per group; got shape {arr.shape}")
    elif arr.ndim == 0:
        arr = np.full(n_groups, float(arr))
    elif arr.ndim != 1 or arr.shape[0] != n_groups:
        raise ValueError(f"{name} must be a scalar or have one value per group ({n_groups}); got shape {arr.shape}")
    if np.any(arr <= 0.0) or np.any(arr >= 1.0):
        raise ValueError(f"{name} must lie strictly inside (0, 1); got values in [{arr.min()}, {arr.max()}]")
    return arr


def check_positive_scalar(value, name: str) -> float:
    """Validate a finite, strictly positive real scalar."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a positive real number; got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value <= 0.0:
        raise ValueError(f"{name} must be finite and > 0; got {value}")
    return value


def check_nonnegative_scalar(value, name: str) -> float:
    """Validate a finite real scalar >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number >= 0; got {value!r}")
    value = float(value)
    if not np.isfinite(value) or value < 0.0:
        raise ValueError(f"{name} must be finite and >= 0; got {value}")
    return value


def check_fraction(value, name: str, *, low_open: bool = True) -> float:
    """Validate a real number in (0, 1] (or [0, 1] when ``low_open`` is False)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number in (0, 1]; got {value!r}")
    value = float(value)
    low_ok = value > 0.0 if low_open else value >= 0.0
    if not (low_ok and value <= 1.0):
        raise ValueError(f"{name} must lie in {'(' if low_open else '['}0, 1]; got {value}")
    return value


def check_count(value, name: str, minimum: int = 1) -> int:
    """Validate an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def check_names(value, allowed: tuple, name: str) -> tuple[str, ...]:
    """Validate a tuple of distinct names from ``allowed`` (a single name is a tuple of one)."""
    names = (value,) if isinstance(value, str) else value
    try:
        names = tuple(names)
    except TypeError:
        raise ValueError(f"{name} must be a tuple of names from {allowed}; got {value!r}") from None
    if any(n not in allowed for n in names) or len(set(names)) != len(names):
        raise ValueError(f"{name} must be distinct names from {allowed}; got {value!r}")
    return names


def check_choice(value, choices: tuple, name: str):
    """Validate that ``value`` is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}; got {value!r}")
    return value


def check_bool(value, name: str) -> bool:
    """Validate a boolean flag (numpy booleans included; 0 and 1 are not flags)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False; got {value!r}")
    return bool(value)


def check_random_state(value, name: str = "random_state") -> None:
    """Validate a seed: None, a non-negative integer, a SeedSequence or a numpy Generator."""
    try:
        check_random_generator(value)
    except ValueError:
        raise ValueError(f"{name} must be None, a non-negative integer seed or a numpy Generator; "
                         f"got {value!r}") from None


def check_random_generator(rng) -> np.random.Generator:
    """``numpy.random.default_rng`` semantics: None (fresh entropy), a non-negative integer seed, a SeedSequence
    or a Generator (used as is); anything else is a ValueError naming ``rng``."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is not None and (isinstance(rng, bool) or not isinstance(rng, (numbers.Integral, np.random.SeedSequence))):
        raise ValueError(f"rng must be None, an integer seed or a numpy Generator; got {rng!r}")
    try:
        return np.random.default_rng(rng)
    except ValueError as exc:
        raise ValueError(f"rng: {exc}") from None


def _as_float_array(value, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"{name} could not be read as a numeric array: {exc}") from None
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"{name} must be numeric; got dtype {arr.dtype}")
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return arr
