"""The estimators' declared parameter constraints (scikit-learn's ``_parameter_constraints``).

Each estimator's ``_check_hyperparameters`` validates them first (``BaseEstimator._validate_params``: an
``InvalidParameterError``, a ValueError naming the parameter and what it must be), then checks what a type cannot
say (finite values, one ``p0`` per group, names in ``learn``).
"""

from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

POSITIVE = [Interval(Real, 0, None, closed="neither")]
POSITIVE_OR_NONE = [Interval(Real, 0, None, closed="neither"), None]
FRACTION = [Interval(Real, 0, 1, closed="right")]  # (0, 1]
PROBABILITY = [Interval(Real, 0, 1, closed="neither"), "array-like"]  # one value, or one per group
COUNT = [Interval(Integral, 1, None, closed="left")]
NON_NEGATIVE_COUNT = [Interval(Integral, 0, None, closed="left")]
FOLDS = [Interval(Integral, 2, None, closed="left")]
GROUPS = [None, Interval(Integral, 1, None, closed="left"), "array-like"]
BOOLEAN = ["boolean"]
NAMES = [tuple, list, str]  # which hyper-parameters to learn: checked by name afterwards


def spike_slab(schedules, learn_methods) -> dict:
    """GroupSpikeSlabEP and SpikeSlabEP."""
    return {"groups": GROUPS, "p0": PROBABILITY, "v0": POSITIVE, "noise_var": POSITIVE, "damping": FRACTION,
            "damping_decay": FRACTION, "tol": POSITIVE, "max_iter": COUNT, "v_inf_ratio": POSITIVE,
            "warm_start": BOOLEAN, "warm_schedule": [StrOptions(set(schedules))], "learn": NAMES,
            "learn_method": [StrOptions(set(learn_methods))], "cv": FOLDS, "restart_every": COUNT,
            "verbose": ["verbose"]}


GROUP_ARD = {"groups": GROUPS, "noise_var": POSITIVE, "tol": POSITIVE, "max_iter": COUNT, "refactor_every": COUNT,
             "warm_start": BOOLEAN, "learn": NAMES}
GROUP_LASSO = {"groups": GROUPS, "alpha": POSITIVE_OR_NONE,
               "k": [Interval(Real, 0, None, closed="neither"), StrOptions({"cv"}), None],
               "tol": POSITIVE, "k_tol": POSITIVE, "max_iter": COUNT, "warm_start": BOOLEAN, "cv": FOLDS,
               "cv_every": COUNT}
_SAMPLER = {"groups": GROUPS, "noise_var": POSITIVE, "n_samples": COUNT, "burn_in": NON_NEGATIVE_COUNT,
            "thin": COUNT, "refactor_every": COUNT, "random_state": ["random_state"], "warm_start": BOOLEAN}
GSS_GIBBS = {**_SAMPLER, "p0": PROBABILITY, "v0": POSITIVE}
HORSESHOE = {**_SAMPLER, "tau": POSITIVE}
BAYESIAN_GROUP_LASSO = {**_SAMPLER, "gamma": POSITIVE}


def garrote(selections, forms) -> dict:
    """VariationalGarrote and its ungrouped form."""
    return {"groups": GROUPS, "p0": PROBABILITY, "v0": POSITIVE, "noise_var": POSITIVE_OR_NONE,
            "gamma_selection": [StrOptions(set(selections)), Real], "n_gamma": FOLDS, "cv": FOLDS, "tol": POSITIVE,
            "max_iter": COUNT, "form": [StrOptions(set(forms))], "random_state": ["random_state"]}


def flas(methods, inits) -> dict:
    """FLAS and its ungrouped form."""
    return {"groups": GROUPS, "p0": PROBABILITY, "v0": POSITIVE, "noise_var": POSITIVE, "r0": POSITIVE_OR_NONE,
            "method": [StrOptions(set(methods))], "init": [StrOptions(set(inits))], "init_group_factor": POSITIVE,
            "n_gh": COUNT, "hessian_floor": BOOLEAN, "tol": POSITIVE, "max_iter": COUNT, "warm_start": BOOLEAN}


def without_groups(constraints: dict) -> dict:
    """The constraints of an ungrouped variant (one group per coefficient: no ``groups`` parameter)."""
    return {name: rule for name, rule in constraints.items() if name != "groups"}
