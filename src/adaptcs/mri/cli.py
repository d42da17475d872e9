"""``python -m adaptcs mri``: retrospective line design on a fully sampled k-space a user gives (docs/mri.md).

Kept apart from :mod:`adaptcs.cli` so that building the parser imports nothing heavy.
"""

from __future__ import annotations

import sys
from pathlib import Path

from adaptcs._names import MRI_ORDERS as ORDERS
from adaptcs._names import MRI_PRIORS as PRIORS


def add_mri_parser(sub) -> None:
    """The ``mri`` subcommand."""
    mri = sub.add_parser(
        "mri", help="design k-space lines on a fully sampled k-space and compare with fixed masks",
        description="Retrospective Cartesian line design: from the centre lines, add the line of largest information "
                    "gain under the posterior of the line model, refit, and score every order (design and fixed "
                    "masks, same reconstructor) against the fully sampled image. Everything in one HDF5 file.")
    mri.add_argument("kspace", help=".npy (complex, (ny, nx)) or .h5/.hdf5 (see --dataset): a fully sampled, centred "
                                    "k-space (DC in the middle), phase encodes along --phase-axis")
    mri.add_argument("--dataset", default="kspace", help="dataset name in an HDF5 file (default kspace, as fastMRI)")
    mri.add_argument("--slice", type=int, help="index along the first axis of a 3-D dataset (slices)")
    mri.add_argument("--phase-axis", type=int, default=0, choices=[0, 1],
                     help="axis of the phase encodes (the lines chosen); 1 for fastMRI files (default 0)")
    mri.add_argument("--lines", type=int, nargs="+", required=True, help="line counts at which to score")
    mri.add_argument("--start", type=int, help="centre lines to start from (default ny / 16)")
    mri.add_argument("--noise-var", type=float,
                     help="noise variance per complex sample (a noise scan); default: estimated from the edges of the "
                          "field of view along the readout")
    mri.add_argument("--wavelet", default="db4", help="orthogonal PyWavelets wavelet (default db4)")
    mri.add_argument("--level", type=int, default=4, help="wavelet levels (default 4)")
    mri.add_argument("--prior", default="gaussian", choices=list(PRIORS),
                     help="gaussian (default): EP converges, design = lines of largest prior variance; sparse: "
                          "spike-and-slab with learned values, adaptive but EP often stops short; phase: the image's "
                          "phase estimated from the centre lines, exact Gaussian, the design skips lines the other "
                          "side of k-space tells (docs/mri.md)")
    mri.add_argument("--profile", default="colin27", choices=["colin27", "flat"],
                     help="slab variances per pair of scales from the Colin27 training slices (default) or all equal")
    mri.add_argument("--orders", nargs="+", default=list(ORDERS), choices=list(ORDERS))
    mri.add_argument("--seed", type=int, default=0, help="seed of the variable-density draw")
    mri.add_argument("--out", required=True, help="HDF5 file to write (atomically)")
    mri.add_argument("--masks", metavar="DIR",
                     help="also write every mask as DIR/<order>-<lines>.npy: booleans, one per phase encode (a "
                          "fastMRI column mask for --phase-axis 1)")
    mri.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    mri.set_defaults(func=run_mri)


def add_mri_lab_parser(sub) -> None:
    """The ``mri-lab`` subcommand: a scanner's ask/tell loop over phase encodes (:mod:`adaptcs.mri.lab`)."""
    lab = sub.add_parser(
        "mri-lab", help="ask for the next k-space lines, tell their readouts, estimate the image",
        description="A scanner's loop over Cartesian phase encodes, state in one HDF5 file: init, then repeat next "
                    "(which lines to measure), add (their readouts), and estimate the image when you stop.")
    steps = lab.add_subparsers(dest="step", required=True)
    init = steps.add_parser("init", help="start a loop")
    init.add_argument("--state", required=True, help="the state file to create")
    init.add_argument("--shape", type=int, nargs=2, required=True, metavar=("NY", "NX"),
                      help="phase encodes and readout samples")
    init.add_argument("--noise-var", type=float, help="noise variance per complex sample (a noise scan); default: "
                                                      "estimated from the readout edges of the lines told")
    init.add_argument("--start", type=int, help="centre lines asked for first (default ny / 16)")
    init.add_argument("--wavelet", default="db4")
    init.add_argument("--level", type=int, default=4)
    init.add_argument("--prior", default="gaussian", choices=list(PRIORS), help="the line model (as for mri)")
    init.add_argument("--profile", default="colin27", choices=["colin27", "flat"])
    nxt = steps.add_parser("next", help="the lines to measure next (printed, one per line; also --out)")
    nxt.add_argument("--state", required=True)
    nxt.add_argument("--batch", type=int, default=1, help="lines per request (default 1)")
    nxt.add_argument("--out", help="also write them to this text file")
    add = steps.add_parser("add", help="tell the readouts of measured lines")
    add.add_argument("--state", required=True)
    add.add_argument("--lines", type=int, nargs="+", required=True, help="phase-encode rows (centred k-space)")
    add.add_argument("--readouts", required=True,
                     help=".npy, complex, shape (len(lines), nx): the readout of each line, in the order of --lines")
    est = steps.add_parser("estimate", help="the image from every line told")
    est.add_argument("--state", required=True)
    est.add_argument("--out", required=True, help=".npy file for the complex image (ny, nx)")
    lab.set_defaults(func=run_mri_lab)


def run_mri_lab(args) -> int:
    """Run one step of the line loop."""
    import numpy as np

    from adaptcs._io import atomic_write, refuse_overwriting_inputs
    from adaptcs.mri import lab

    if args.step == "init":
        state = lab.init(args.state, args.shape, wavelet=args.wavelet, level=args.level, prior=args.prior,
                         profile=args.profile, start=args.start, noise_var=args.noise_var)
        print(f"started {args.state}: {state.ny} x {state.nx}, prior {state.prior}, {state.start} centre lines first")
    elif args.step == "next":
        lines, about = lab.next_lines(args.state, args.batch)
        for line in lines:
            print(int(line))
        if args.out:
            refuse_overwriting_inputs({"--out": args.out}, {"--state": args.state})
            atomic_write(args.out, lambda tmp: np.savetxt(tmp, lines, fmt="%d"))
        if "converged" in about and not about["converged"]:
            print(f"warning: the fit behind this choice is not at EP's fixed point ({about['columns_not_converged']} "
                  "columns still moving)", file=sys.stderr)
    elif args.step == "add":
        readouts = np.load(args.readouts, allow_pickle=False)
        state = lab.add(args.state, args.lines, readouts)
        print(f"{state.lines.shape[0]} lines told")
    else:
        refuse_overwriting_inputs({"--out": args.out}, {"--state": args.state})
        fit, about = lab.estimate(args.state)
        def write(tmp):
            with open(tmp, "wb") as handle:
                np.save(handle, fit.image)

        atomic_write(args.out, write)
        print(f"{about['lines']} lines, noise variance {about['noise_var']:.4g} ({about['noise_source']}); "
              f"converged: {about['converged']}; columns not converged: {about['columns_not_converged']}; "
              f"{about['fit_cpu_seconds']:.1f} CPU s; wrote {args.out}")
    return 0


def read_kspace(path: str, dataset: str = "kspace", index: int | None = None, phase_axis: int = 0):
    """A 2-D complex k-space from .npy or HDF5, with the phase encodes along axis 0."""
    import numpy as np

    suffix = Path(path).suffix.lower()
    if suffix == ".npy":
        data = np.load(path, allow_pickle=False)
    elif suffix in (".h5", ".hdf5"):
        import h5py

        with h5py.File(path, "r") as f:
            if dataset not in f:
                raise ValueError(f"{path} has no dataset {dataset!r} (it has: {', '.join(f.keys())})")
            data = f[dataset][()] if index is None else f[dataset][index]
    else:
        raise ValueError(f"{path}: give a .npy or an HDF5 (.h5, .hdf5) file")
    if data.ndim == 3 and index is not None and suffix == ".npy":
        data = data[index]
    if data.ndim != 2:
        raise ValueError(f"{path}: the k-space must be 2-D (ny, nx) (a 3-D dataset needs --slice); got shape "
                         f"{data.shape}")
    if not np.iscomplexobj(data):
        raise ValueError(f"{path}: the k-space must be complex; got {data.dtype}")
    return np.ascontiguousarray(data if phase_axis == 0 else data.T)


def write_masks(folder: Path, masks: dict, ny: int) -> None:
    """Every mask as ``folder/<order>-<count>.npy``: a boolean array of shape (ny,), True on the lines measured."""
    import numpy as np

    from adaptcs._io import atomic_write

    folder.mkdir(parents=True, exist_ok=True)
    for (order, count), lines in masks.items():
        mask = np.zeros(ny, bool)
        mask[lines] = True

        def save(tmp, mask=mask):
            with open(tmp, "wb") as handle:
                np.save(handle, mask)

        atomic_write(folder / f"{order}-{count}.npy", save)


def run_mri(args) -> int:
    """Run the replay and write its HDF5 file; prints the table."""
    import h5py
    import numpy as np
    from threadpoolctl import threadpool_limits

    from adaptcs._io import atomic_write, refuse_overwriting_inputs
    from adaptcs.mri.replay import replay

    refuse_overwriting_inputs({"--out": args.out}, {"kspace": args.kspace})
    kspace = read_kspace(args.kspace, args.dataset, args.slice, args.phase_axis)
    start = args.start if args.start is not None else max(1, kspace.shape[0] // 16)
    with threadpool_limits(args.threads):
        result = replay(kspace, counts=args.lines, start=start, orders=args.orders, noise_var=args.noise_var,
                        wavelet=args.wavelet, level=args.level, prior=args.prior, profile=args.profile,
                        seed=args.seed)

    def write(path):
        with h5py.File(path, "w") as f:
            f.attrs.update({"kspace": str(args.kspace), "noise_var": result.noise_var,
                            "noise_source": result.noise_source, "prior": args.prior, "profile": args.profile,
                            "wavelet": args.wavelet, "level": args.level, "start": start,
                            "phase_axis": args.phase_axis, "command": " ".join(sys.argv)})
            if result.design_lines is not None:
                f["design_lines"] = result.design_lines
            for (order, count), image in result.images.items():
                group = f.require_group(f"{order}/{count}")
                group["image"] = image
                group["lines"] = result.masks[order, count]
                mask = np.zeros(kspace.shape[0], bool)
                mask[result.masks[order, count]] = True
                group["mask"] = mask  # one entry per phase encode (fastMRI: a column mask)
                row = next(r for r in result.rows if r["order"] == order and r["lines"] == count)
                group.attrs.update(row)

    atomic_write(args.out, write)
    if args.masks:
        write_masks(Path(args.masks), result.masks, kspace.shape[0])
    print(f"noise variance {result.noise_var:.4g} ({result.noise_source}); relative error / PSNR (dB) of the "
          "magnitude against the fully sampled image:")
    counts = sorted({r["lines"] for r in result.rows})
    print("| order | " + " | ".join(f"{c} lines" for c in counts) + " |")
    print("|---|" + "---:|" * len(counts))
    for order in args.orders:
        cells = [next(r for r in result.rows if r["order"] == order and r["lines"] == c) for c in counts]
        print(f"| {order} | " + " | ".join(f"{r['relative_error']:.4f} / {r['psnr']:.2f}" for r in cells) + " |")
    unconverged = [r for r in result.rows if not r["converged"]]
    if unconverged:
        print(f"warning: {len(unconverged)} of {len(result.rows)} reconstructions are not at EP's fixed point "
              "(attribute converged and columns_not_converged in the file)", file=sys.stderr)
    print(f"wrote {args.out}" + (f" and the masks in {args.masks}/" if args.masks else ""))
    return 0
