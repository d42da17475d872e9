"""Command line for people who do not use Snakemake: ``python -m adaptcs {run,table,curves} ...``.

Examples::

    python -m adaptcs run --experiment E3 --method gss_ep --strategy design --replicates 0:50 \\
        --out results/runs/E3-0-gss_ep-design.h5
    python -m adaptcs table results/runs/E2-*.h5
    python -m adaptcs curves results/runs/E3-*.h5 --every 8
"""

from __future__ import annotations

import argparse
import logging
import sys

from adaptcs.experiments import SYNTHETIC, run_synthetic_job
from adaptcs.models.registry import METHODS
from adaptcs.results import curves_table, final_table, write_job
from adaptcs.tables import summary_table, to_markdown


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

    with threadpool_limits(args.threads):
        job = run_synthetic_job(args.experiment, args.setting, args.method, args.strategy, args.replicates,
                                progress=True)
        path = write_job(args.out, job)
    logging.getLogger("adaptcs").info("wrote %s", path)
    return 0


def _table(args) -> int:
    table = summary_table(final_table(args.files))
    for experiment, block in table.groupby("experiment", sort=True):
        print(f"## {experiment}\n\n{to_markdown(block)}")
    return 0


def _curves(args) -> int:
    curves = curves_table(args.files)
    cells = curves.groupby(["method", "strategy", "n_measurements"])
    # the mean over the replicates that had not failed by that step; the failed ones are counted, not hidden
    table = cells["error"].mean().unstack("n_measurements")
    failed = curves[curves["failed"]].groupby(["method", "strategy"])["replicate"].nunique()
    replicates = curves.groupby(["method", "strategy"])["replicate"].nunique()
    columns = [c for i, c in enumerate(table.columns) if i % args.every == 0 or i == len(table.columns) - 1]
    print("| method | strategy | " + " | ".join(f"n={c}" for c in columns) + " | failed |")
    print("|---|---|" + "---:|" * len(columns) + "---:|")
    for (method, strategy), row in table[columns].iterrows():
        print(f"| {method} | {strategy} | " + " | ".join(f"{v:.3f}" for v in row)
              + f" | {failed.get((method, strategy), 0)} of {replicates[method, strategy]} |")
    print("\nMean relative error over the replicates that had not failed by that number of rows (nan: none).")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m adaptcs", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one job (experiment, setting, method, strategy, replicates)")
    run.add_argument("--experiment", required=True, choices=sorted(SYNTHETIC))
    run.add_argument("--setting", type=int, default=0, help="setting index (E2: label-noise fraction)")
    run.add_argument("--method", required=True, choices=sorted(METHODS))
    run.add_argument("--strategy", default="random", choices=["design", "random", "pool"])
    run.add_argument("--replicates", type=parse_replicates, default=parse_replicates("0:10"),
                     help="0:50 (half-open range) or 0,3,7 (default 0:10)")
    run.add_argument("--out", required=True, help="HDF5 file to write (atomically)")
    run.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    run.set_defaults(func=_run)

    table = sub.add_parser("table", help="final errors, mean +- std, from result files")
    table.add_argument("files", nargs="+")
    table.set_defaults(func=_table)

    curves = sub.add_parser("curves", help="mean error against the number of rows, from result files")
    curves.add_argument("files", nargs="+")
    curves.add_argument("--every", type=int, default=4, help="print every k-th step (default 4)")
    curves.set_defaults(func=_curves)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
