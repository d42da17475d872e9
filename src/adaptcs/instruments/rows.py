"""The lab of rows: any measurement that is one row of numbers times the unknowns (``python -m adaptcs lab
--instrument rows``): free rows on the sphere or of +-a entries, a pool of candidate rows, or pixel patterns of an
image in a basis. The single-pixel camera's lab (:mod:`adaptcs.instruments.camera`) is these steps with ``init``
showing basis images. The state file and the commands are :mod:`adaptcs.lab.rows`; rows and values files take
numbers separated by commas, spaces or tabs, one record per line, with an optional header line and # comments.
"""

from __future__ import annotations

import math
import sys

from adaptcs._names import BASES, ROW_LAB_FORMAT
from adaptcs.instruments.base import Instrument


def _init(args) -> int:
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


def _next(args) -> int:
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


def _add(args) -> int:
    from adaptcs.lab import rows as lab

    info = lab.add(args.state, args.rows, args.values, again=args.again)
    print(f"{args.state}: added {info['rows']} measurements as add {info['call']} ({info['asked']} of them asked "
          f"for); {info['n_measured']} in all")
    return 0


def _remove(args) -> int:
    from adaptcs.lab import rows as lab

    info = lab.remove(args.state, args.batch)
    print(f"{args.state}: took back the {info['rows']} measurements of add {info['batch']} (kept in the file as "
          f"removed); {info['n_measured']} in the fit")
    return 0


def _estimate(args) -> int:
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


def add_lab_steps(parser, *, camera: bool = False) -> None:
    """The row lab's steps as subcommands of ``parser``; ``camera``: ``init`` shows the basis images of ``--basis``
    (strategy predict or pool; no groups file)."""
    steps = parser.add_subparsers(dest="step", required=True)
    init = steps.add_parser("init", help="start: groups, fixed hyper-parameters (others learned), strategy")
    if camera:
        init.add_argument("--basis", choices=list(BASES), required=True,
                          help="the basis whose images the camera shows (rows asked for and told are its images, "
                               "in pixels)")
    else:
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
    if camera:
        init.add_argument("--strategy", default="predict", choices=["predict", "pool"],
                          help="predict (default): the wavelet prediction scan of the basis images (a wavelet "
                               "--basis); pool: the designed choice among the basis images given as --pool")
    else:
        init.add_argument("--strategy", default="design", choices=["design", "random", "pool", "predict"],
                          help="predict: the wavelet prediction scan of basis images (needs a wavelet --basis)")
    init.add_argument("--row-constraint", default="sphere", choices=["sphere", "binary"],
                      help="binary: rows of +-a entries, a = row norm / sqrt(d) (micromirror patterns)")
    init.add_argument("--row-norm", type=float, help="norm of the rows asked for (default sqrt(d))")
    init.add_argument("--pool", help="CSV of candidate rows (strategy pool)")
    init.add_argument("--seed", type=int, default=0, help="seed of random rows and eigenvector starts")
    init.add_argument("--force", action="store_true", help="overwrite an existing state file")
    init.set_defaults(func=_init, groups=None)

    ask = steps.add_parser("next", help="write the next rows to measure")
    ask.add_argument("--state", required=True)
    ask.add_argument("--batch", type=int, default=1, help="rows to ask for (default 1)")
    ask.add_argument("--out", required=True, help="CSV to write: one row per line")
    ask.set_defaults(func=_next)

    tell = steps.add_parser("add", help="add measured rows and their values (asked for or not)")
    tell.add_argument("--state", required=True)
    tell.add_argument("--rows", required=True, help="one measured row per line (numbers separated by commas, "
                                                    "spaces or tabs; a header line is allowed)")
    tell.add_argument("--values", required=True, help="one measured value per line, in the same order")
    tell.add_argument("--again", action="store_true",
                      help="the rows and values repeat an earlier add exactly and are a real repeat measurement")
    tell.set_defaults(func=_add)

    take_back = steps.add_parser("remove", help="take back the measurements of one add (kept in the file, logged)")
    take_back.add_argument("--state", required=True)
    take_back.add_argument("--batch", type=int, required=True,
                           help="which add to take back: 0 for the first, as 'add' reports it")
    take_back.set_defaults(func=_remove)

    est = steps.add_parser("estimate", help="posterior mean, std and group probabilities from all measurements")
    est.add_argument("--state", required=True)
    est.add_argument("--out", required=True, help="CSV to write: coefficient, group, mean, std, group_prob")
    est.add_argument("--image", help="with a basis: also write the posterior mean image (CSV, side x side pixels)")
    est.set_defaults(func=_estimate)


ROWS = Instrument("rows", "rows of numbers (a groups file: free rows or a pool; or pixel patterns in a basis)",
                  state_format=ROW_LAB_FORMAT, add_lab_steps=add_lab_steps)
