"""The job runner: one (experiment, setting, method, hyper-parameters, strategy) over many replicates.

A job asks its :class:`~adaptcs.experiments.base.Experiment` for each replicate's
:class:`~adaptcs.experiments.case.Case` and for the measurement plan, runs each case through the sequential design
loop (zero steps for E1, E2 and E4) and returns a :class:`adaptcs.results.JobResult`.
Problems depend only on (experiment, setting, replicate), never on the method, so every method sees the same
signals, rows and noise.
"""

from __future__ import annotations

import json
import logging
import time

import numpy as np
import pandas as pd

from adaptcs.data.synthetic import problem_rng
from adaptcs.experiments._replicate_store import load_replicate, replicate_path, save_replicate
from adaptcs.experiments.base import Experiment
from adaptcs.experiments.registry import EXPERIMENTS, get_experiment
from adaptcs.experiments.strategies import allowed_strategies, check_strategy
from adaptcs.experiments.synthetic import SyntheticExperiment
from adaptcs.metrics import image_quality
from adaptcs.models.registry import HYPERPARAMETERS, check_method, variant_label
from adaptcs.results import FITTED, JobResult

log = logging.getLogger(__name__)


def check_n_steps(experiment: str | Experiment, n_steps: int | None, data_options: dict | None = None) -> int:
    """The design steps of ``experiment``: its definition's when ``n_steps`` is None, else ``n_steps``, refused
    (ValueError) when the rows would outnumber the coefficients."""
    return _experiment(experiment, data_options).check_n_steps(n_steps)


def _experiment(experiment: str | Experiment, data_options: dict | None) -> Experiment:
    if isinstance(experiment, Experiment):
        if data_options:
            raise ValueError("give the data options of an Experiment object through its options, not data_options")
        return experiment
    return get_experiment(experiment, data_options)


def run_job(experiment: str | Experiment, setting_index: int, method: str, strategy: str, replicates, *,
            method_params: dict | None = None, progress: bool = False, n_steps: int | None = None,
            data_options: dict | None = None, hyperparameters: str | None = None,
            checkpoint_dir=None) -> JobResult:
    """Run ``replicates`` of one (experiment, setting, method, hyper-parameters, strategy) through the design
    loop.

    Parameters
    ----------
    experiment : str or Experiment
        A name of :data:`adaptcs.experiments.registry.EXPERIMENTS`, the name of an experiment of a kind (with
        ``data_options`` holding its ``kind``), or the experiment itself.
    setting_index : int
        Index into the experiment's settings (E2: label-noise fraction; E4-E6: digit and prior knowledge).
    method : str
        A name of :data:`adaptcs.models.registry.METHODS`.
    strategy : str
        A name of :data:`adaptcs.experiments.strategies.STRATEGIES` the experiment can run.
    replicates : iterable of int
    method_params : dict, optional
        Estimator parameters that replace the paper's (e.g. ``{"tol": 1e-5}``).
    progress : bool
        Log a line per replicate (level INFO) with its final error and time, and where its design loop is every
        :data:`PROGRESS_SECONDS`.
    n_steps : int, optional
        Design steps (default: the experiment's).
    data_options : dict, optional
        The experiment's data options, as result files record them (:attr:`Experiment.options`): MNIST's
        ``source``, ``cache_dir``, ``path`` and ``groups``; E7 those and ``basis``; a user experiment ``kind: user``
        and its data block.
    hyperparameters : {"oracle", "learned"}, optional
        The paper's values from the true signal, or learned from the measurements (:func:`case_estimator`);
        default the experiment's first (oracle where it has one).
    checkpoint_dir : str or path, optional
        Where the job keeps each finished replicate (:mod:`adaptcs.experiments._replicate_store`) and the method's
        Gibbs chains save their state (``checkpoint_dir`` of :mod:`adaptcs.models.gibbs`), as does the design loop
        of the replicate under way (``resume_file`` of :func:`adaptcs.design.run_sequential_design`), so that the
        job run again after a kill reads the replicates done and goes on from the loop's and the chain's last
        saves, to the same numbers.
        The caller removes the folder once the result is safe.
    """
    data_options = dict(data_options or {})
    spec = _experiment(experiment, data_options)
    replicates = [int(r) for r in replicates]
    if not replicates:
        raise ValueError("replicates must not be empty")
    method_entry = check_method(method)
    hyperparameters = spec.default_hyperparameters[0] if hyperparameters is None else hyperparameters
    if hyperparameters not in HYPERPARAMETERS:
        raise ValueError(f"hyperparameters must be one of {HYPERPARAMETERS}; got {hyperparameters!r}")
    if strategy not in allowed_strategies(spec):
        raise ValueError(f"{spec.name} takes the strategies {allowed_strategies(spec)}; got {strategy!r}")
    check_strategy(strategy)
    steps = spec.check_n_steps(n_steps)
    spec.check_setting(setting_index)
    if hyperparameters == "oracle":
        spec.check_oracle()
    plan = spec.plan(setting_index, steps, strategy)
    given_params = dict(method_params or {})
    method_params, calibration = method_entry.calibrated(spec, setting_index, hyperparameters, dict(given_params))
    label = variant_label(method, hyperparameters)
    identity = {"experiment": spec.name, "setting": setting_index, "method": method, "strategy": strategy,
                "hyperparameters": hyperparameters, "n_steps": steps, "method_params": given_params,
                "data_options": dict(spec.options)}
    cases, results, quality = [], [], []
    for i, replicate in enumerate(replicates):
        case = spec.case(setting_index, replicate)
        if hyperparameters == "oracle":
            spec.check_oracle(case)
        p = case.problem
        start = time.perf_counter()
        kept = None if checkpoint_dir is None else replicate_path(
            checkpoint_dir, identity, replicate,
            {"w_true": p.w_true, "groups": p.groups, "X": p.X, "y": p.y, "noise_var": p.noise_var,
             "fit_groups": case.fit_groups, "region": np.zeros(0) if case.region is None else case.region})
        result = None if kept is None else load_replicate(kept)
        if result is not None:
            log.info("%s setting %d %s/%s replicate %d: finished in an earlier run of this job, read from %s",
                     spec.name, setting_index, label, strategy, replicate, kept)
        else:
            estimator = spec.make_estimator(method, case, method_params, hyperparameters)
            if checkpoint_dir is not None:
                _save_chains_in(estimator, checkpoint_dir)
            callback = _step_logger(f"{spec.name} setting {setting_index} {label}/{strategy} replicate "
                                    f"{replicate}", steps) if progress else None
            resume_file = None if kept is None else kept.with_name(f"loop-{kept.name}")  # the loop part-way
            result = spec.run_case(estimator, case, replicate, plan, strategy, problem_rng(*case.design_seed),
                                   callback, resume_file=resume_file)
            if kept is not None:
                save_replicate(kept, result)
        if plan.image_side is not None:
            failed = (np.nan, np.nan)
            side = plan.image_side
            quality.append(failed if result.failed else image_quality(result.coef, p.w_true, (side, side),
                                                                        region=case.region))
        if progress:
            log.info("%s setting %d %s/%s replicate %d (%d/%d): error %.3f at n=%d, %.2f s, %d of %d fits not "
                     "converged", spec.name, setting_index, label, strategy, replicate, i + 1, len(replicates),
                     result.errors[-1], result.n_measurements[-1], time.perf_counter() - start,
                     int(np.sum(result.converged == 0)), result.converged.size)
        if result.failed:
            log.warning("%s setting %d %s/%s replicate %d FAILED at %s", spec.name, setting_index, label, strategy,
                        replicate, result.failure)
        cases.append(case)
        results.append(result)

    is_image = plan.image_side is not None
    d = results[0].coef.shape[0]
    group_probs = [r.group_prob for r in results]
    if any(g is not None for g in group_probs):  # failed replicates have none: NaN rows keep the shape
        G = next(g for g in group_probs if g is not None).shape[0]
        group_probs = [np.full(G, np.nan) if g is None else g for g in group_probs]
    fitted = {name: np.array([r.hyperparameters.get(name, np.nan) for r in results]) for name in FITTED}
    checkpoint_n = np.unique(np.concatenate([r.checkpoint_n for r in results])).astype(np.int64)
    has_checkpoints = checkpoint_n.size > 0
    return JobResult(
        experiment=spec.name, setting_index=setting_index, setting=dict(spec.settings[setting_index]),
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
        residual=np.stack([r.residual for r in results]),
        finite=np.stack([r.finite for r in results]), failure=np.array([r.failure for r in results], dtype=str),
        blocks_not_converged=None if results[0].blocks_not_converged is None
        else np.stack([r.blocks_not_converged for r in results]),
        psnr=np.array([q[0] for q in quality]) if is_image else None,
        ssim=np.array([q[1] for q in quality]) if is_image else None,
        **{f"fitted_{name}": values if np.any(np.isfinite(values)) else None for name, values in fitted.items()},
        config={"experiment": spec.name, "setting_index": setting_index, "method": method,
                "hyperparameters": hyperparameters, "strategy": strategy, "replicates": replicates,
                "method_params": method_params, "n_steps": steps, "data_options": dict(spec.options), **calibration})


def _save_chains_in(estimator, folder) -> None:
    """Set every ``checkpoint_dir`` parameter of ``estimator`` (and of the estimators inside it) to ``folder``."""
    params = estimator.get_params(deep=True) if hasattr(estimator, "get_params") else {}
    names = [name for name in params if name == "checkpoint_dir" or name.endswith("__checkpoint_dir")]
    if names:
        estimator.set_params(**{name: str(folder) for name in names})


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
    """:func:`run_job` for the synthetic experiments (E1-E3); ``overrides`` may set ``n_steps``."""
    unknown = set(overrides) - {"n_steps"}
    if unknown:
        raise ValueError(f"unknown experiment parameter(s): {sorted(unknown)}")
    if not isinstance(EXPERIMENTS.get(experiment), SyntheticExperiment):
        synthetic = [name for name, e in EXPERIMENTS.items() if isinstance(e, SyntheticExperiment)]
        raise ValueError(f"experiment must be one of {synthetic}; got {experiment!r}")
    return run_job(experiment, setting_index, method, strategy, replicates, method_params=method_params,
                   progress=progress, n_steps=overrides.get("n_steps"))


def problem_manifest(experiment: str | Experiment, replicates, settings=None,
                     data_options: dict | None = None) -> pd.DataFrame:
    """One row per (setting, replicate): seeds, active groups and signal size of the problems used."""
    spec = _experiment(experiment, data_options)
    settings = range(len(spec.settings)) if settings is None else settings
    rows = []
    for setting_index in settings:
        for replicate in replicates:
            case = spec.case(setting_index, int(replicate))
            p = case.problem
            # active groups exist where the signals are exactly sparse in them (not E7's images in a basis)
            active = np.unique(p.groups[p.w_true != 0]) if spec.has_oracle else np.zeros(0, dtype=np.int64)
            rows.append({"experiment": spec.name, "setting_index": setting_index,
                         "setting": json.dumps(spec.settings[setting_index], sort_keys=True),
                         "replicate": int(replicate),
                         "problem_seed": " ".join(map(str, case.problem_seed)),
                         "design_seed": " ".join(map(str, case.design_seed)),
                         "active_groups": " ".join(map(str, active)), "n_nonzero": int(np.count_nonzero(p.w_true)),
                         "signal_norm": float(np.linalg.norm(p.w_true)),
                         "labels_changed": float(np.mean(case.fit_groups != p.groups)),
                         "p0_group": float(np.mean(case.prior.p0_group)), "v0": case.prior.v0})
    return pd.DataFrame(rows)
