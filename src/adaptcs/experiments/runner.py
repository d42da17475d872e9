"""The job runner: one (experiment, setting, method, hyper-parameters, strategy) over many replicates.

A job builds each replicate's :class:`~adaptcs.experiments.case.Case` with the experiment's kind
(:mod:`~adaptcs.experiments.synthetic` E1-E3, :mod:`~adaptcs.experiments.mnist` E4-E6,
:mod:`~adaptcs.experiments.wavelet` E7, :mod:`~adaptcs.experiments.user` the user's own), runs it through the
sequential design loop (zero steps for E1, E2 and E4) and returns a :class:`adaptcs.results.JobResult`.
Problems depend only on (experiment, setting, replicate), never on the method, so every method sees the same
signals, rows and noise.
"""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import pandas as pd

from adaptcs.data.mnist import SIDE
from adaptcs.data.synthetic import problem_rng
from adaptcs.design import run_sequential_design
from adaptcs.experiments.case import case_estimator
from adaptcs.experiments.mnist import MNIST, cached_mnist, g_lasso_k, mnist_case
from adaptcs.experiments.synthetic import SYNTHETIC, synthetic_case
from adaptcs.experiments.user import UserExperiment, check_oracle, user_case
from adaptcs.experiments.wavelet import E7, SEQUENCES, WaveletExperiment, check_basis, sequence_rows, wavelet_case
from adaptcs.metrics import image_quality
from adaptcs.models.registry import variant_label
from adaptcs.results import FITTED, JobResult

log = logging.getLogger(__name__)


def check_n_steps(experiment: str, n_steps: int | None, data_options: dict | None = None) -> int:
    """The design steps of ``experiment``: its definition's when ``n_steps`` is None, else ``n_steps``, refused
    (ValueError) when the rows would outnumber the coefficients (n_initial + n_steps > d)."""
    spec = experiment_spec(experiment, data_options)
    if n_steps is None:
        return spec.n_steps
    if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 0:
        raise ValueError(f"n_steps must be a non-negative integer; got {n_steps!r}")
    if experiment == "E7":
        if n_steps > spec.max_steps():
            raise ValueError(f"n_steps must be at most {spec.max_steps()} in E7 (d / 16 initial rows + n_steps steps "
                             f"of d / 256 rows must not exceed d); got {n_steps}")
        return int(n_steps)
    limit = spec.d - spec.n_initial
    if n_steps > limit:
        raise ValueError(f"n_steps must be at most {limit} in {experiment} (its {spec.n_initial} initial rows + "
                         f"n_steps rows must not exceed its d = {spec.d} coefficients); got {n_steps}")
    return int(n_steps)


def is_user(data_options: dict | None) -> bool:
    """Whether the data options describe a ``kind: user`` experiment (:mod:`adaptcs.experiments.user`)."""
    return bool(data_options) and data_options.get("kind") == "user"


def experiment_spec(experiment: str, data_options: dict | None = None):
    """The definition of a synthetic, MNIST or (with ``data_options`` of kind user) user experiment."""
    if is_user(data_options):
        return UserExperiment.from_options(experiment, data_options)
    if experiment == "E7":
        basis = check_basis((data_options or {}).get("basis", E7.basis))
        return E7 if basis == E7.basis else WaveletExperiment(basis=basis)
    if experiment in SYNTHETIC:
        return SYNTHETIC[experiment]
    if experiment in MNIST:
        return MNIST[experiment]
    raise ValueError(f"experiment must be one of {sorted(SYNTHETIC) + sorted(MNIST) + ['E7']}; got {experiment!r}")


def run_job(experiment: str, setting_index: int, method: str, strategy: str, replicates, *,
            method_params: dict | None = None, progress: bool = False, n_steps: int | None = None,
            data_options: dict | None = None, hyperparameters: str = "oracle") -> JobResult:
    """Run ``replicates`` of one (experiment, setting, method, hyper-parameters, strategy) through the design
    loop.

    Parameters
    ----------
    experiment : {"E1", ..., "E7"} or the name of a user experiment (with ``data_options`` of kind user)
    setting_index : int
        Index into the experiment's settings (E2: label-noise fraction; E4-E6: digit and prior knowledge).
    method : str
        A name of :data:`adaptcs.models.registry.METHODS`.
    strategy : {"design", "random", "topdown", "pca"}
        ``topdown`` and ``pca`` are E7's fixed designs (:mod:`adaptcs.experiments.wavelet`).
    replicates : iterable of int
    method_params : dict, optional
        Estimator parameters that replace the paper's (e.g. ``{"tol": 1e-5}``).
    progress : bool
        Log a line per replicate (level INFO) with its final error and time, and where its design loop is every
        :data:`PROGRESS_SECONDS`.
    n_steps : int, optional
        Design steps (default: the experiment's).
    data_options : dict, optional
        MNIST: ``source``, ``cache_dir``, ``path`` (see :func:`adaptcs.data.mnist.load_mnist`) and
        ``groups`` ("similarity" or "blocks"); E7 takes the MNIST ones and ``basis``. User experiments:
        ``kind: user`` and the options of :class:`adaptcs.experiments.user.UserExperiment`.
    hyperparameters : {"oracle", "learned"}
        The paper's values from the true signal, or learned from the measurements (:func:`case_estimator`).
    """
    data_options = dict(data_options or {})
    spec = experiment_spec(experiment, data_options)
    replicates = [int(r) for r in replicates]
    if not replicates:
        raise ValueError("replicates must not be empty")
    method_params = dict(method_params or {})
    steps = check_n_steps(experiment, n_steps, data_options)
    user = is_user(data_options)
    wavelet = experiment == "E7"
    is_image = experiment in MNIST or wavelet or (user and spec.is_image)
    side = spec.side if user else SIDE
    if user:
        checkpoints = spec.default_checkpoints(steps)
    else:
        checkpoints = spec.kept_rows(steps) if experiment in MNIST else ()
    batch_size = 1
    if wavelet:
        setting = spec.settings[setting_index] if 0 <= setting_index < len(spec.settings) else None
        if setting is None:
            raise ValueError(f"setting_index must be in 0..{len(spec.settings) - 1} for E7; got {setting_index}")
        if hyperparameters == "oracle":
            raise ValueError("E7's images are not exactly sparse in the wavelet basis, so there is no oracle: use "
                             "hyperparameters: [learned]")
        unknown = set(data_options) - {"source", "cache_dir", "path", "groups", "basis"}
        if unknown:
            raise ValueError(f"unknown E7 option(s): {sorted(unknown)}")
        side, batch_size = setting["side"], spec.batch_size(setting)
        checkpoints = spec.checkpoints(setting, steps)
        bases = {}

        def make_case(replicate):
            case, bases[replicate] = wavelet_case(setting_index, replicate, spec=spec, data_options=data_options)
            return case
    elif user:
        def make_case(replicate):
            case = user_case(spec, replicate)
            if hyperparameters == "oracle":
                check_oracle(spec, case)
            return case
    elif experiment in MNIST:
        unknown = set(data_options) - {"source", "cache_dir", "path", "groups"}
        if unknown:
            raise ValueError(f"unknown MNIST option(s): {sorted(unknown)}")
        data = cached_mnist(data_options.get("source", "embedded"), data_options.get("cache_dir"),
                            data_options.get("path"))

        def make_case(replicate):
            return mnist_case(experiment, setting_index, replicate, data=data,
                              groups=data_options.get("groups", "similarity"))
    else:
        if data_options:
            raise ValueError(f"{experiment} takes no data options; got {sorted(data_options)}")
        overrides = {} if n_steps is None else {"n_steps": steps}

        def make_case(replicate):
            return synthetic_case(experiment, setting_index, replicate, **overrides)

    calibration = {}
    if (experiment in MNIST and not user and method == "g_lasso" and hyperparameters == "oracle"
            and not {"k", "alpha"} & set(method_params)):
        # The paper chose G-LASSO's k per digit: here from a grid, on the digit's grouping images.
        k, scores = g_lasso_k(data, spec.settings[setting_index]["digit"], data_options.get("groups", "similarity"))
        method_params["k"] = k
        calibration = {"g_lasso_k_errors": {f"{key:g}": error for key, error in scores.items()}}
    label = variant_label(method, hyperparameters)
    cases, results, quality = [], [], []
    for i, replicate in enumerate(replicates):
        case = make_case(replicate)
        p = case.problem
        estimator = case_estimator(method, case, method_params, hyperparameters)
        basis, loop_strategy, pool = None, strategy, None
        if wavelet:
            basis = bases[replicate]
            if strategy in SEQUENCES:
                loop_strategy = "sequence"
                pool = sequence_rows(strategy, setting, basis, steps * batch_size, data_options)
        start = time.perf_counter()
        callback = _step_logger(f"{experiment} setting {setting_index} {label}/{strategy} replicate {replicate}",
                                steps) if progress else None
        result = run_sequential_design(estimator, p.w_true, p.X, p.y, steps, strategy=loop_strategy,
                                       noise_var=p.noise_var, row_norm=float(np.sqrt(p.w_true.shape[0])),
                                       rng=problem_rng(*case.design_seed), checkpoints=checkpoints, pool=pool,
                                       batch_size=batch_size, basis=basis, callback=callback)
        if is_image:
            failed = (np.nan, np.nan)
            quality.append(failed if result.failed else image_quality(result.coef, p.w_true, (side, side)))
        if progress:
            log.info("%s setting %d %s/%s replicate %d (%d/%d): error %.3f at n=%d, %.2f s, %d of %d fits not "
                     "converged", experiment, setting_index, label, strategy, replicate, i + 1, len(replicates),
                     result.errors[-1], result.n_measurements[-1], time.perf_counter() - start,
                     int(np.sum(result.converged == 0)), result.converged.size)
        if result.failed:
            log.warning("%s setting %d %s/%s replicate %d FAILED at %s", experiment, setting_index, label, strategy,
                        replicate, result.failure)
        cases.append(case)
        results.append(result)

    d = results[0].coef.shape[0]
    group_probs = [r.group_prob for r in results]
    if any(g is not None for g in group_probs):  # failed replicates have none: NaN rows keep the shape
        G = next(g for g in group_probs if g is not None).shape[0]
        group_probs = [np.full(G, np.nan) if g is None else g for g in group_probs]
    fitted = {name: np.array([r.hyperparameters.get(name, np.nan) for r in results]) for name in FITTED}
    checkpoint_n = np.unique(np.concatenate([r.checkpoint_n for r in results])).astype(np.int64)
    has_checkpoints = checkpoint_n.size > 0
    return JobResult(
        experiment=experiment, setting_index=setting_index, setting=dict(spec.settings[setting_index]),
        method=method, hyperparameters=hyperparameters, strategy=strategy,
        replicate=np.asarray(replicates, dtype=np.int64),
        n_measurements=results[0].n_measurements, errors=np.stack([r.errors for r in results]),
        fit_seconds=np.stack([r.fit_seconds for r in results]),
        select_seconds=np.stack([r.select_seconds for r in results]),
        coef=np.stack([r.coef for r in results]), w_true=np.stack([c.problem.w_true for c in cases]),
        group_prob=None if group_probs[0] is None else np.stack(group_probs),
        true_groups=np.stack([c.problem.groups for c in cases]), fit_groups=np.stack([c.fit_groups for c in cases]),
        problem_seed=np.asarray([c.problem_seed for c in cases], dtype=np.int64),
        design_seed=np.asarray([c.design_seed for c in cases], dtype=np.int64),
        checkpoint_n=checkpoint_n if has_checkpoints else None,
        checkpoint_coef=np.stack([_checkpoints(r, checkpoint_n, d) for r in results])
        if has_checkpoints else None,
        converged=np.stack([r.converged for r in results]), n_iter=np.stack([r.n_iter for r in results]),
        finite=np.stack([r.finite for r in results]), failure=np.array([r.failure for r in results], dtype=str),
        psnr=np.array([q[0] for q in quality]) if is_image else None,
        ssim=np.array([q[1] for q in quality]) if is_image else None,
        **{f"fitted_{name}": values if np.any(np.isfinite(values)) else None for name, values in fitted.items()},
        config={"experiment": experiment, "setting_index": setting_index, "method": method,
                "hyperparameters": hyperparameters, "strategy": strategy, "replicates": replicates,
                "method_params": method_params, "n_steps": steps, "data_options": data_options, **calibration})


PROGRESS_SECONDS = 30.0  # a replicate's design loop logs where it is at most this often


def _step_logger(name: str, n_steps: int):
    """A design-loop callback that logs the step, rows and error at most every :data:`PROGRESS_SECONDS`."""
    last = [time.perf_counter()]

    def callback(step: int, n_measurements: int, error: float) -> None:
        now = time.perf_counter()
        if now - last[0] >= PROGRESS_SECONDS:
            last[0] = now
            log.info("%s: step %d of %d, %d rows, error %.3f", name, step, n_steps, n_measurements, error)

    return callback


def _checkpoints(result, wanted_n, d: int) -> np.ndarray:
    """The estimates of a run at the rows ``wanted_n``; NaN where a failed run never reached them."""
    out = np.full((len(wanted_n), d), np.nan)
    for i, n in enumerate(wanted_n):
        hit = np.flatnonzero(result.checkpoint_n == n)
        if hit.size:
            out[i] = result.checkpoint_coef[hit[0]]
    return out


def run_synthetic_job(experiment: str, setting_index: int, method: str, strategy: str, replicates,
                      *, method_params: dict | None = None, progress: bool = False, **overrides) -> JobResult:
    """:func:`run_job` for E1-E3; ``overrides`` may set ``n_steps``."""
    unknown = set(overrides) - {"n_steps"}
    if unknown:
        raise ValueError(f"unknown experiment parameter(s): {sorted(unknown)}")
    if experiment not in SYNTHETIC:
        raise ValueError(f"experiment must be one of {sorted(SYNTHETIC)}; got {experiment!r}")
    return run_job(experiment, setting_index, method, strategy, replicates, method_params=method_params,
                   progress=progress, n_steps=overrides.get("n_steps"))


def problem_manifest(experiment: str, replicates, settings=None, data_options: dict | None = None) -> pd.DataFrame:
    """One row per (setting, replicate): seeds, active groups and signal size of the problems used."""
    data_options = dict(data_options or {})
    spec = experiment_spec(experiment, data_options)
    settings = range(len(spec.settings)) if settings is None else settings
    rows = []
    for setting_index in settings:
        for replicate in replicates:
            if is_user(data_options):
                case = user_case(spec, int(replicate))
            elif experiment == "E7":
                case, _basis = wavelet_case(setting_index, int(replicate), spec=spec, data_options=data_options)
            elif experiment in MNIST:
                data = cached_mnist(data_options.get("source", "embedded"), data_options.get("cache_dir"),
                                    data_options.get("path"))
                case = mnist_case(experiment, setting_index, int(replicate), data=data,
                                  groups=data_options.get("groups", "similarity"))
            else:
                case = synthetic_case(experiment, setting_index, int(replicate))
            p = case.problem
            # E7: the groups are of basis coefficients, and no image is exactly sparse in them
            active = np.unique(p.groups[p.w_true != 0]) if experiment != "E7" else np.zeros(0, dtype=np.int64)
            rows.append({"experiment": experiment, "setting_index": setting_index,
                         "setting": json.dumps(spec.settings[setting_index], sort_keys=True),
                         "replicate": int(replicate),
                         "problem_seed": " ".join(map(str, case.problem_seed)),
                         "design_seed": " ".join(map(str, case.design_seed)),
                         "active_groups": " ".join(map(str, active)), "n_nonzero": int(np.count_nonzero(p.w_true)),
                         "signal_norm": float(np.linalg.norm(p.w_true)),
                         "labels_changed": float(np.mean(case.fit_groups != p.groups)),
                         "p0_group": float(np.mean(case.prior.p0_group)), "v0": case.prior.v0})
    return pd.DataFrame(rows)
