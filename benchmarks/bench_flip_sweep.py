"""Flip one bit at a time in a result file or a lab state and read it back: no silent change, no traceback, no hang.

Four targets (issue 46's acceptance, and the camera state's tracked fit):

- ``job``: a job file of a real E3 job (2 replicates, 6 steps); read as ``python -m adaptcs table`` and ``curves``
  read it (:func:`adaptcs.results.curves_table`, the summary table and its markdown).
- ``summary``: a summary file merging that job with the same job of another strategy; read the same way.
- ``lab``: a lab state after init, two adds, a next and a remove; read by :func:`adaptcs.lab.state.load_state`.
- ``camera``: a single-pixel camera's lab state (8 x 8 Haar, a pool of its basis images) after three rounds of
  next and add and a last next, which keeps the tracked fit in the state; read the same way.

Each flip writes a copy of the file with one bit changed and reads it in a forked child under a time limit.
Outcomes: ``error`` (a one-line error of the file's own kind naming the file: what must happen to damage that
matters), ``same`` (read, and everything read is what was written: the bit was unused, e.g. free space),
``changed`` (read without error, but something differs: a silent change, the defect counted), ``traceback`` (any
other exception) and ``hang`` (no answer within ``--timeout`` seconds; the child is killed). The bytes flipped
(one random bit each): ``--flips`` random bytes (default 5,000), four in five of them in the file's metadata (everything
outside the datasets' chunks, where HDF5's checksums may not reach) and the rest in the chunks (Fletcher-32
covered); for the lab states without ``--flips``, and with ``--every-byte``, every byte of the file.

Run: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_flip_sweep.py --target job summary lab camera`` (about 25
minutes on 2 cores).
Exit status 1 if any flip was silent, a traceback or a hang.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import hashlib
import io
import json
import os
import select
import signal
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from adaptcs import results
from adaptcs._io import write_numbers
from adaptcs.lab import rows as lab
from adaptcs.tables import summary_table, to_markdown

OUTCOMES = ("error", "same", "changed", "traceback", "hang")


# -- what is read, as a digest ------------------------------------------------------------------------------------

def read_tables(path) -> str:
    """Digest of everything a table or a curve shows from a result file (job or summary)."""
    curves = results.curves_table([path])
    table = to_markdown(summary_table(results.final_rows(curves)))
    text = curves.to_csv(index=False, float_format="%.17g") + table
    return hashlib.sha256(text.encode()).hexdigest()


def read_state(path) -> str:
    """Digest of everything a lab command reads from a state (settings, arrays, log, the tracked fit)."""
    state = lab.load_state(path)
    sha = hashlib.sha256()

    def add(name, value):
        if isinstance(value, np.ndarray):
            sha.update(f"{name}:{value.dtype.str}:{value.shape}".encode() + np.ascontiguousarray(value).tobytes())
        elif isinstance(value, dict) and any(isinstance(v, np.ndarray) for v in value.values()):
            for key, item in sorted(value.items()):
                add(f"{name}.{key}", item)
        else:
            sha.update(f"{name}:{json.dumps(value, sort_keys=True, default=str)}".encode())

    for name, value in sorted(vars(state).items()):
        add(name, value)
    return sha.hexdigest()


KNOWN_ERRORS = {"job": results.ResultFileError, "summary": results.ResultFileError, "lab": lab.StateError,
                "camera": lab.StateError}
READERS = {"job": read_tables, "summary": read_tables, "lab": read_state, "camera": read_state}


# -- the files --------------------------------------------------------------------------------------------------

def make_files(folder: Path) -> dict[str, Path]:
    """A real job file, a summary file, a lab state and a camera's lab state in ``folder``."""
    from adaptcs.experiments.runner import run_job

    jobs = [run_job("E3", 0, "gss_ep", strategy, [0, 1], n_steps=6) for strategy in ("design", "random")]
    paths = {"job": folder / "job.h5", "summary": folder / "summary.h5", "lab": folder / "state.h5",
             "camera": folder / "camera.h5"}
    results.write_job(paths["job"], jobs[0])
    results.write_summary(paths["summary"], jobs)

    rng = np.random.default_rng(0)
    d = 24
    (folder / "groups.csv").write_text("\n".join(str(i // 4) for i in range(d)))
    truth = np.where(np.arange(d) < 8, rng.normal(size=d), 0.0)
    lab.init(paths["lab"], folder / "groups.csv", noise_var=0.01)
    for _ in range(2):
        rows = rng.normal(size=(5, d))
        write_numbers(folder / "rows.csv", rows)
        write_numbers(folder / "values.csv", rows @ truth + 0.1 * rng.normal(size=5))
        lab.add(paths["lab"], folder / "rows.csv", folder / "values.csv")
    lab.next_rows(paths["lab"], folder / "asked.csv", batch=2)
    lab.remove(paths["lab"], 0)
    make_camera_state(paths["camera"], folder)
    return paths


def make_camera_state(path: Path, folder: Path) -> None:
    """A camera's lab state (8 x 8 Haar of depth 1, a pool of its basis images) whose last ``next`` kept the
    tracked fit."""
    from adaptcs.bases.images import make_basis

    basis = make_basis("haar", 8, level=1)
    u = np.arange(8) / 8
    coef = basis.analyze((0.4 + 0.5 * (np.add.outer(u, u) > 0.9)).ravel())
    write_numbers(folder / "pool.csv", basis.synthesize(np.eye(basis.d)))
    lab.init(path, basis="haar", side=8, level=1, strategy="pool", pool_path=folder / "pool.csv")
    for _ in range(3):
        lab.next_rows(path, folder / "rows.csv", 8)
        rows = np.loadtxt(folder / "rows.csv", delimiter=",", ndmin=2)
        write_numbers(folder / "values.csv", coef[np.abs(basis.analyze(rows)).argmax(axis=1)] + 0.01)
        lab.add(path, folder / "rows.csv", folder / "values.csv")
    lab.next_rows(path, folder / "rows.csv", 8)
    assert lab.load_state(path).tracked_fit is not None


def chunk_ranges(path: Path) -> list[tuple[int, int]]:
    """Byte ranges (start, stop) of every dataset chunk in an HDF5 file."""
    ranges = []

    def visit(_name, obj):
        if isinstance(obj, h5py.Dataset):
            if obj.chunks is None:
                offset = obj.id.get_offset()
                if offset is not None:
                    ranges.append((offset, offset + obj.id.get_storage_size()))
                return
            for i in range(obj.id.get_num_chunks()):
                info = obj.id.get_chunk_info(i)
                ranges.append((info.byte_offset, info.byte_offset + info.size))

    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return ranges


def flip_positions(path: Path, flips: int, every_byte: bool, rng) -> list[tuple[int, int]]:
    """(byte, bit) pairs: ``flips`` random bytes, four in five of the metadata (outside the chunks, where a flip
    can change what a pointer leads to) and the rest in the chunks; or every byte of the file."""
    size = path.stat().st_size
    if every_byte:
        return [(i, int(rng.integers(8))) for i in range(size)]
    in_chunk = np.zeros(size, dtype=bool)
    for start, stop in chunk_ranges(path):
        in_chunk[start:stop] = True
    metadata, data = np.flatnonzero(~in_chunk), np.flatnonzero(in_chunk)
    n_metadata = min(metadata.size, int(0.8 * flips))
    chosen = np.concatenate([rng.choice(metadata, size=n_metadata, replace=False),
                             rng.choice(data, size=min(data.size, flips - n_metadata), replace=False)])
    return [(int(i), int(rng.integers(8))) for i in np.sort(chosen)]


# -- one flip in a child ----------------------------------------------------------------------------------------

def read_in_child(target: str, path: Path, timeout: float) -> tuple[str, str]:
    """(outcome, detail) of reading ``path`` in a forked child, killed after ``timeout`` seconds."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: read, report, exit without cleanup
        os.close(read_end)
        try:
            message = "ok " + READERS[target](path)
        except KNOWN_ERRORS[target] as exc:
            message = "error " + str(exc).replace("\n", " ")
        except BaseException as exc:  # noqa: BLE001 - every other exception is the defect counted
            message = f"traceback {type(exc).__name__}: {exc}".replace("\n", " ")
        with contextlib.suppress(OSError):
            os.write(write_end, message.encode()[:4000])
        os._exit(0)
    os.close(write_end)
    ready, _, _ = select.select([read_end], [], [], timeout)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read_end)
        return "hang", f"no answer in {timeout:g} s"
    chunks = []
    while chunk := os.read(read_end, 4096):
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    message = b"".join(chunks).decode(errors="replace")
    kind, _, detail = message.partition(" ")
    return (kind if kind in ("error", "traceback") else "ok"), detail


def sweep(target: str, path: Path, flips: int, every_byte: bool, timeout: float, seed: int) -> dict:
    """Flip bits of ``path`` one at a time; counts of each outcome and examples of the bad ones."""
    reference = READERS[target](path)
    original = path.read_bytes()
    positions = flip_positions(path, flips, every_byte, np.random.default_rng(seed))
    counts, examples = collections.Counter(), collections.defaultdict(list)
    damaged = path.with_name(f"flipped-{path.name}")
    start = time.perf_counter()
    for k, (byte, bit) in enumerate(positions):
        data = bytearray(original)
        data[byte] ^= 1 << bit
        damaged.write_bytes(data)
        kind, detail = read_in_child(target, damaged, timeout)
        if kind == "ok":
            kind = "same" if detail == reference else "changed"
        elif kind == "error" and str(damaged) not in detail:
            kind, detail = "traceback", "error without the file's name: " + detail
        counts[kind] += 1
        if kind in ("changed", "traceback", "hang") and len(examples[kind]) < 5:
            examples[kind].append(f"byte {byte} bit {bit}: {detail[:200]}")
        if (k + 1) % 1000 == 0:
            print(f"  {target}: {k + 1} of {len(positions)} flips ({time.perf_counter() - start:.0f} s)", flush=True)
    damaged.unlink(missing_ok=True)
    return {"target": target, "bytes": len(original), "flips": len(positions), "counts": counts,
            "examples": examples}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", nargs="+", choices=list(READERS), default=list(READERS))
    parser.add_argument("--flips", type=int, help="flips per file (default: 5000 for a job or summary file, every "
                                                   "byte of a lab state)")
    parser.add_argument("--every-byte", action="store_true", help="flip every byte of the file (one random bit)")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds before a read counts as a hang")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        with contextlib.redirect_stderr(io.StringIO()):
            paths = make_files(Path(tmp))
        for target in args.target:
            every_byte = args.every_byte or (target in ("lab", "camera") and args.flips is None)
            report = sweep(target, paths[target], args.flips or 5000, every_byte, args.timeout,
                           args.seed)
            counts = report["counts"]
            print(f"{target}: {report['flips']} flips of a {report['bytes']}-byte file: "
                  + ", ".join(f"{counts[o]} {o}" for o in OUTCOMES))
            for kind, lines in report["examples"].items():
                for line in lines:
                    print(f"    {kind}: {line}")
            bad += counts["changed"] + counts["traceback"] + counts["hang"]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
