"""MRI, Cartesian k-space lines (docs/mri.md): the phase encodes are chosen, each measured as a full readout.

Its replay (``python -m adaptcs replay --instrument mri``) designs lines retrospectively on a fully sampled k-space a
user gives and scores the design and fixed masks against its full image (:func:`adaptcs.mri.replay.replay`); its lab
(``python -m adaptcs lab --instrument mri``) is a scanner's ask/tell loop over phase encodes
(:mod:`adaptcs.lab.lines`). Building the parsers imports nothing heavy.
"""

from __future__ import annotations

import sys
from pathlib import Path

from adaptcs._names import LINE_LAB_FORMAT
from adaptcs._names import MRI_ORDERS as ORDERS
from adaptcs._names import MRI_PRIORS as PRIORS
from adaptcs.instruments.base import Instrument

REPLAY_DESCRIPTION = ("Retrospective Cartesian line design: from the centre lines, add the line of largest "
                      "information gain under the posterior of the line model, refit, and score every order (design "
                      "and fixed masks, same reconstructor) against the fully sampled image. Everything in one HDF5 "
                      "file.")
LAB_DESCRIPTION = ("A scanner's loop over Cartesian phase encodes, state in one HDF5 file: init, then repeat next "
                   "(which lines to measure), add (their readouts), and estimate the image when you stop; remove "
                   "takes back the lines of one add.")


def add_replay_arguments(mri) -> None:
    """The MRI replay's arguments on ``mri``."""
    mri.add_argument("kspace", help=".npy (complex, (ny, nx), or (slices, ny, nx) with --slice) or .h5/.hdf5 (see "
                                    "--dataset): a fully sampled, centred, single-coil k-space (DC in the middle), "
                                    "phase encodes along --phase-axis; multi-coil data: --coils model or combine")
    mri.add_argument("--coils", default="single", choices=["single", "combine", "model"],
                     help="a multi-coil k-space ((coils, ny, nx), or (slices, coils, ny, nx) with --slice, as "
                          "fastMRI's multi-coil files), prewhitened by the coils' noise covariance (--noise-cov, or "
                          "from the readout edges): model: the coil line model, every coil's lines with its "
                          "sensitivity (ESPIRiT's of the centre lines, or --sensitivities), prior phase or gaussian; "
                          "combine: combined into one virtual coil by those sensitivities (the design then models one "
                          "coil)")
    mri.add_argument("--calibration", type=int,
                     help="--coils combine or model: centre lines for ESPIRiT (default: 24 for combine; the --start "
                          "lines for model, which every order measures)")
    mri.add_argument("--sensitivities", metavar="NPY",
                     help="--coils model: the coils' sensitivities instead of ESPIRiT's, .npy complex (coils, ny, nx) "
                          "in the file's orientation (phase encodes along --phase-axis), of the coils as recorded")
    mri.add_argument("--noise-cov", metavar="NPY",
                     help="--coils model or combine: the coils' noise covariance per complex sample, .npy (coils, "
                          "coils), or a noise scan, .npy complex (coils, samples...) with more samples than coils; "
                          "default: estimated from the readout edges")
    mri.add_argument("--dataset", default="kspace", help="dataset name in an HDF5 file (default kspace, as fastMRI)")
    mri.add_argument("--slice", type=int, help="index along the first axis of a 3-D dataset (slices)")
    mri.add_argument("--phase-axis", type=int, default=0, choices=[0, 1],
                     help="axis of the phase encodes (the lines chosen); 1 for fastMRI files (default 0); the images "
                          "written keep the file's orientation")
    mri.add_argument("--lines", type=int, nargs="+", required=True, help="line counts at which to score")
    mri.add_argument("--start", type=int, help="centre lines to start from (default ny / 16)")
    mri.add_argument("--noise-var", type=float,
                     help="noise variance per complex sample (a noise scan); default: estimated from the edges of the "
                          "field of view along the readout")
    mri.add_argument("--wavelet", default="db4", help="orthogonal PyWavelets wavelet (default db4)")
    mri.add_argument("--level", type=int, default=4, help="wavelet levels (default 4)")
    mri.add_argument("--prior", default="gaussian", choices=list(PRIORS),
                     help="phase: the image's phase estimated from the centre lines, trusted per column as far as "
                          "the lines outside them agree, exact Gaussian: the design measures one side of k-space where "
                          "the phase is known and both where it is not; gaussian (default): the same model at its "
                          "phase-blind end (eps = 1; the design is then fixed by the centre lines); sparse: "
                          "spike-and-slab with learned values, adaptive but EP often stops short; phase_sparse: "
                          "spike-and-slab on the phase model's phase-corrected image, adaptive, slower, and below "
                          "phase on simulated slices (docs/mri.md)")
    mri.add_argument("--profile", default="colin27", choices=["colin27", "flat"],
                     help="slab variances per y-scale (sparse: per pair of scales) from the Colin27 training "
                          "slices (default) or all equal")
    mri.add_argument("--orders", nargs="+", default=list(ORDERS), choices=list(ORDERS), metavar="ORDER",
                     help=f"the orders to score (default all): {', '.join(ORDERS)}")
    mri.add_argument("--seed", type=int, default=0, help="seed of the random masks' draws")
    mri.add_argument("--out", required=True, help="HDF5 file to write (atomically)")
    mri.add_argument("--masks", metavar="DIR",
                     help="also write every mask as DIR/<order>-<lines>.npy: booleans, one per phase encode (a "
                          "fastMRI column mask for --phase-axis 1)")
    mri.add_argument("--threads", type=int, default=1, help="BLAS threads (default 1)")
    mri.set_defaults(func=run_mri)


def add_lab_steps(lab) -> None:
    """The line lab's steps as subcommands of ``lab``: a scanner's ask/tell loop over phase encodes."""
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
    init.add_argument("--coils", type=int, default=1,
                      help="receive coils (default 1): every readout is then (coils, nx), the model the coil line "
                           "model (prior phase or gaussian)")
    init.add_argument("--sensitivities", metavar="NPY",
                      help="with --coils: their sensitivities, .npy complex (coils, ny, nx), as recorded; default "
                           "ESPIRiT's of the --start centre lines (at least 8), asked for first")
    init.add_argument("--noise-cov", metavar="NPY",
                      help="with --coils: their noise covariance per complex sample, .npy (coils, coils), or a noise "
                           "scan, .npy complex (coils, samples...) with more samples than coils; default: estimated "
                           "from the readout edges of the lines told")
    nxt = steps.add_parser("next", help="the lines to measure next (printed, one per line; also --out)")
    nxt.add_argument("--state", required=True)
    nxt.add_argument("--batch", type=int, default=1, help="lines per request (default 1)")
    nxt.add_argument("--out", help="also write them to this text file")
    add = steps.add_parser("add", help="tell the readouts of measured lines")
    add.add_argument("--state", required=True)
    add.add_argument("--lines", nargs="+", required=True,
                     help="phase-encode rows (centred k-space), or the file `next --out` wrote")
    add.add_argument("--readouts", required=True,
                     help=".npy, complex, shape (len(lines), nx), or (len(lines), coils, nx) with coils: the readout "
                          "of each line, in the order of --lines")
    add.add_argument("--again", action="store_true",
                     help="the lines were told before and these are real repeat measurements: the model fits each "
                          "line's mean readout (its noise variance divided by the readouts averaged)")
    take_back = steps.add_parser("remove", help="take back the lines of one add (kept in the file, logged)")
    take_back.add_argument("--state", required=True)
    take_back.add_argument("--batch", type=int, required=True,
                           help="which add to take back: 0 for the first, as 'add' reports it")
    est = steps.add_parser("estimate", help="the image from every line told")
    est.add_argument("--state", required=True)
    est.add_argument("--out", required=True, help=".npy file for the complex image (ny, nx)")
    lab.set_defaults(func=run_mri_lab)


def _lines_argument(values: list[str]) -> list[int]:
    """``--lines``: integers, or one text file of integers (what ``next --out`` writes)."""
    import numpy as np

    if len(values) == 1 and not values[0].lstrip("-").isdigit():
        path = Path(values[0])
        if not path.is_file():
            raise ValueError(f"--lines: {values[0]!r} is neither a line number nor a file of them")
        try:
            return [int(v) for v in np.atleast_1d(np.loadtxt(path, dtype=np.int64, ndmin=1))]
        except ValueError as exc:
            raise ValueError(f"--lines: {path} does not hold line numbers, one per line ({exc})") from None
    try:
        return [int(v) for v in values]
    except ValueError:
        raise ValueError(f"--lines takes integers (phase-encode rows) or one file of them; got {values}") from None


def run_mri_lab(args) -> int:
    """Run one step of the line loop."""
    import numpy as np

    from adaptcs._io import atomic_write, check_output_path
    from adaptcs.lab import lines as lab
    from adaptcs.readers import load_npy

    if args.step == "init":
        maps = load_npy(args.sensitivities, "--sensitivities") if args.sensitivities else None
        covariance = noise_covariance_argument(args.noise_cov, args.coils) if args.noise_cov else None
        state = lab.init(args.state, args.shape, wavelet=args.wavelet, level=args.level, prior=args.prior,
                         profile=args.profile, start=args.start, noise_var=args.noise_var, coils=args.coils,
                         sensitivities=maps, noise_covariance=covariance)
        coils = f", {state.coils} coils" if state.coils > 1 else ""
        print(f"started {args.state}: {state.ny} x {state.nx}{coils}, prior {state.prior}, {state.start} centre lines "
              "first")
    elif args.step == "next":
        if args.out:  # before the state records the request
            check_output_path(args.out, "--out", {"--state": args.state})
        lines, about = lab.next_lines(args.state, args.batch)
        for line in lines:
            print(int(line))
        if args.out:
            atomic_write(args.out, lambda tmp: np.savetxt(tmp, lines, fmt="%d"))
        if "converged" in about and not about["converged"]:
            print(f"warning: the fit behind this choice is not at EP's fixed point ({about['columns_not_converged']} "
                  "columns still moving)", file=sys.stderr)
    elif args.step == "add":
        lines = _lines_argument(args.lines)
        readouts = load_npy(args.readouts, "--readouts")
        state = lab.add(args.state, lines, readouts, again=args.again)
        distinct = np.unique(state.lines).shape[0]
        repeats = f" ({state.lines.shape[0]} readouts)" if distinct != state.lines.shape[0] else ""
        print(f"{distinct} lines told{repeats} (add {state.n_adds - 1})")
    elif args.step == "remove":
        info = lab.remove(args.state, args.batch)
        print(f"took back the lines {info['lines']} of add {info['batch']} (kept in the file as removed); "
              f"{info['n_told']} lines in the fit")
    else:
        check_output_path(args.out, "--out", {"--state": args.state})
        fit, about = lab.estimate(args.state)

        def write(tmp):
            with open(tmp, "wb") as handle:
                np.save(handle, fit.image_)

        atomic_write(args.out, write)
        print(f"{about['lines']} lines, noise variance {about['noise_var']:.4g} ({about['noise_source']}); "
              f"converged: {about['converged']}; columns not converged: {about['columns_not_converged']}; "
              f"{about['fit_cpu_seconds']:.1f} CPU s; wrote {args.out}")
    return 0


def check_grid(shape: tuple[int, int], level: int, phase_axis: int) -> None:
    """ValueError naming the axis and ``--level`` if a ``level``-level separable wavelet does not fit ``shape``
    (phase encodes, readout)."""
    step = 2**level
    for size, name, axis in ((shape[0], "phase encodes", phase_axis), (shape[1], "readout samples", 1 - phase_axis)):
        if size % step:
            raise ValueError(f"the k-space has {size} {name} (axis {axis} of the file); a {level}-level wavelet "
                             f"(--level) needs a multiple of {step}: crop or zero-pad to "
                             f"{size // step * step or step} or {(size // step + 1) * step}, or lower --level")


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

    from adaptcs._io import atomic_write, check_output_path
    from adaptcs.mri.replay import replay
    from adaptcs.readers import read_kspace

    check_output_path(args.out, "--out", {"kspace": args.kspace})  # every output checked before any work
    if args.masks:
        masks = Path(args.masks)
        if masks.exists() and not masks.is_dir():
            raise ValueError(f"{masks}: --masks names a file; give a folder (nothing was written)")
        for option, other in (("--out", args.out), ("kspace", args.kspace)):
            if masks.resolve() == Path(other).resolve():
                raise ValueError(f"{masks}: --masks names the file of {option} (nothing was written)")
    if args.sensitivities and args.coils != "model":
        raise ValueError("--sensitivities is for --coils model")
    if args.noise_cov and args.coils == "single":
        raise ValueError("--noise-cov is for a receive array (--coils model or combine); one coil takes --noise-var")
    maps, combination, noise_source = None, "", ""
    if args.coils == "combine":
        kspace, noise_var, coils, noise_source = _combined(args)
        combination = f"prewhitened (noise covariance {noise_source}), ESPIRiT sensitivities of the centre lines, " \
                      "one virtual coil"
    elif args.coils == "model":
        kspace, maps, source, noise_source = _whitened_coils(args)
        noise_var, coils = 1.0, kspace.shape[0]
        combination = f"prewhitened (noise covariance {noise_source}), {source}, the coil line model"
    else:
        kspace, noise_var, coils = read_kspace(args.kspace, args.dataset, args.slice, args.phase_axis), \
            args.noise_var, 1
    ny = kspace.shape[-2]
    check_grid(kspace.shape[-2:], args.level, args.phase_axis)
    start = args.start if args.start is not None else max(1, ny // 16)
    with threadpool_limits(args.threads), _progress(args, "design") as progress:
        result = replay(kspace, counts=args.lines, start=start, orders=args.orders, noise_var=noise_var,
                        wavelet=args.wavelet, level=args.level, prior=args.prior, profile=args.profile,
                        seed=args.seed, progress=progress, sensitivities=maps)
    if coils > 1:  # 1 is not a variance the user gave: the coils were whitened to it
        result.noise_source = f"the coils prewhitened by their noise covariance {noise_source}"
    orient = (lambda image: image) if args.phase_axis == 0 else (lambda image: image.T)  # the file's orientation

    def write(path):
        with h5py.File(path, "w") as f:
            f.attrs.update({"kspace": str(args.kspace), "noise_var": result.noise_var,
                            "noise_source": result.noise_source, "prior": args.prior, "profile": args.profile,
                            "wavelet": args.wavelet, "level": args.level, "start": start,
                            "phase_axis": args.phase_axis, "command": " ".join(sys.argv), "coils": coils,
                            "coil_combination": combination,
                            "image_axes": "as the input file" if args.phase_axis == 0 else
                            "as the input file (phase encodes along axis 1)"})
            if result.design_lines is not None:
                f["design_lines"] = result.design_lines
            if maps is not None:  # of the prewhitened coils, in the file's orientation
                f["sensitivities"] = maps if args.phase_axis == 0 else np.swapaxes(maps, 1, 2)
            for (order, count), image in result.images.items():
                group = f.require_group(f"{order}/{count}")
                group["image"] = orient(image)
                group["lines"] = result.masks[order, count]
                mask = np.zeros(ny, bool)
                mask[result.masks[order, count]] = True
                group["mask"] = mask  # one entry per phase encode (fastMRI: a column mask)
                row = next(r for r in result.rows if r["order"] == order and r["lines"] == count)
                group.attrs.update(row)

    atomic_write(args.out, write)
    if args.masks:
        write_masks(Path(args.masks), result.masks, ny)
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


def noise_covariance_argument(path: str, coils: int):
    """``--noise-cov``: a (coils, coils) noise covariance as given, or the covariance of a noise scan (coils,
    samples...) with more samples than coils (:func:`adaptcs.mri.coils.noise_covariance`); ValueError naming the
    option otherwise."""
    import numpy as np

    from adaptcs.mri.coils import noise_covariance
    from adaptcs.readers import load_npy

    array = load_npy(path, "--noise-cov")
    if array.ndim < 2 or array.shape[0] != coils:
        raise ValueError(f"--noise-cov: a ({coils}, {coils}) covariance or a noise scan ({coils}, samples...) for "
                         f"the {coils} coils; got shape {array.shape}")
    if array.shape == (coils, coils):
        return array
    if not np.iscomplexobj(array):
        raise ValueError(f"--noise-cov: a noise scan is complex samples ({coils}, samples...); got {array.dtype}")
    try:
        return noise_covariance(array)
    except ValueError as exc:
        raise ValueError(f"--noise-cov: {exc}") from None


def _coil_noise(args, data):
    """The coils' noise covariance (``--noise-cov``, else the readout edges of ``data``) and where it came from."""
    from adaptcs.mri.coils import noise_covariance_from_readout_edges

    if args.noise_var is not None:
        raise ValueError(f"--noise-var is for one coil: with --coils {args.coils} the coils are prewhitened by their "
                         "noise covariance (--noise-cov, or from the readout edges), noise variance 1")
    if args.noise_cov:
        return noise_covariance_argument(args.noise_cov, data.shape[0]), f"given ({args.noise_cov})"
    return noise_covariance_from_readout_edges(data), "from the readout edges"


def _combined(args):
    """``--coils combine``: the virtual coil's k-space (phase encodes along axis 0), its noise variance, the
    number of coils (:func:`adaptcs.mri.coils.combine_coils`) and where the noise covariance came from."""
    from adaptcs.mri.coils import combine_coils
    from adaptcs.readers import read_multicoil_kspace

    data = read_multicoil_kspace(args.kspace, args.dataset, args.slice, args.phase_axis)
    covariance, noise_source = _coil_noise(args, data)
    kspace, _maps = combine_coils(data, covariance, args.calibration or 24)
    return kspace, 1.0, data.shape[0], noise_source


def _whitened_coils(args):
    """``--coils model``: the prewhitened coils' k-space (coils, ny, nx), phase encodes along axis 1, their
    sensitivities (ESPIRiT's of the centre lines, or ``--sensitivities`` whitened alike), where those came from and
    where the noise covariance came from."""
    import numpy as np

    from adaptcs.mri.coils import espirit_maps, prewhiten
    from adaptcs.readers import load_npy, read_multicoil_kspace

    data = read_multicoil_kspace(args.kspace, args.dataset, args.slice, args.phase_axis)
    covariance, noise_source = _coil_noise(args, data)
    kspace = prewhiten(data, covariance)
    if args.sensitivities:
        maps = load_npy(args.sensitivities, "--sensitivities")
        maps = maps if args.phase_axis == 0 or maps.ndim != 3 else np.swapaxes(maps, 1, 2)
        if maps.shape != data.shape or not np.iscomplexobj(maps):
            raise ValueError(f"--sensitivities must be complex of the k-space's shape (coils, ny, nx) "
                             f"{data.shape}; got {maps.dtype} {maps.shape}")
        return kspace, prewhiten(maps, covariance), "the sensitivities given", noise_source
    calibration = args.calibration or (args.start if args.start is not None else max(1, kspace.shape[1] // 16))
    maps = espirit_maps(kspace, calibration)
    return kspace, maps, f"ESPIRiT sensitivities of the {calibration} centre lines", noise_source


class _progress:
    """A tqdm bar over the designed lines on stderr (none with --quiet): a context manager giving the replay's
    ``progress(done, total)``."""

    def __init__(self, args, what: str):
        self.quiet, self.what, self.bar = getattr(args, "quiet", False), what, None

    def __enter__(self):
        def update(done: int, total: int) -> None:
            if self.quiet:
                return
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(total=total, initial=done, desc=f"{self.what}: lines", unit="line", file=sys.stderr,
                                leave=False)
            self.bar.n = done
            self.bar.refresh()

        return update

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False


MRI = Instrument("mri", "MRI: Cartesian k-space lines (phase encodes), each measured as a full readout",
                 state_format=LINE_LAB_FORMAT, add_lab_steps=add_lab_steps, add_replay_arguments=add_replay_arguments,
                 lab_description=LAB_DESCRIPTION, replay_description=REPLAY_DESCRIPTION)
