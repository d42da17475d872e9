"""The single-pixel camera: it shows basis images (a wavelet's or the DCT's) and measures one value per image.

Its lab (``python -m adaptcs lab --instrument camera``) is the row lab's steps (:mod:`adaptcs.instruments.rows`)
with ``init`` showing the images of ``--basis``: fitted with the replay's model (the wavelet tree with the
prediction, exact) and choosing what the replay would. Its replay (``python -m adaptcs replay --instrument camera``)
replays a complete basis scan in several acquisition orders (:func:`adaptcs.replay.replay_scan`): each order
chooses only among the measured patterns, and each reconstruction is scored against the full-scan image.
"""

from __future__ import annotations

import functools
import sys

from adaptcs._names import BASES, REPLAY_ORDERS, REPLAY_PRIORS, ROW_LAB_FORMAT
from adaptcs.instruments.base import Instrument
from adaptcs.instruments.rows import add_lab_steps as add_row_lab_steps


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


def add_replay_arguments(replay) -> None:
    """The camera replay's arguments on ``replay`` (a complete basis scan replayed in several orders)."""
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
                             "better on simulated photon scans, docs/log/results.md)")
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


CAMERA = Instrument("camera", "a single-pixel camera showing basis images (one value per image)",
                    state_format=ROW_LAB_FORMAT, add_lab_steps=functools.partial(add_row_lab_steps, camera=True),
                    add_replay_arguments=add_replay_arguments,
                    replay_description="Replay a basis scan an instrument made (a single-pixel camera showing basis "
                                       "images): each order chooses only among the measured patterns, and each "
                                       "reconstruction is scored against the full-scan image.")
