"""CPU cost of every kind of workflow job, and the CPU hours of a whole configuration.

``--measure`` runs one replicate of each (experiment, method, hyper-parameters, strategy) of the configuration
(its first setting) in this process, with one BLAS thread, and writes the CPU seconds per replicate to
``src/adaptcs/job_costs.json``, which the workflow uses to ask the cluster for each job's runtime
(:func:`adaptcs.jobs.job_runtime_minutes`). To keep the measurement short, the samplers (methods with an
``n_samples`` parameter) run a tenth of their sweeps (cost is linear in sweeps) and the design loops of the
``--short-loops`` experiments (default E5, E6: MNIST) ``--mnist-steps`` of their steps, scaled up by the ratio of
steps times ``GROWTH`` (later steps have more rows, and an EP iteration costs O(n^2 d)).

``--from-run RESULTS`` takes the costs from the benchmark files of a finished workflow run of ``--config`` instead
(CPU seconds of each job over its replicates, the largest over settings and chunks), e.g. E7 at 64 x 64, whose
jobs are too long to measure in one process.

Without ``--measure`` it prints the CPU hours of the configuration from the job list and the stored costs.

Run: ``python benchmarks/bench_job_costs.py --config config/paper.yaml [--measure [--experiments E4 --methods g_hs
--strategies random]]``.
Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import yaml
from threadpoolctl import threadpool_limits

from adaptcs import jobs as jb
from adaptcs.config import resolve
from adaptcs.experiments import run_job
from adaptcs.models.gibbs import PAPER_BURN_IN, PAPER_N_SAMPLES
from adaptcs.models.registry import METHODS

GIBBS_FRACTION = 10
GROWTH = 1.4  # mean cost of a step of the full E5 loop (128 -> 288 rows) over a step of its first part


def measure(config: dict, mnist_steps: int, short_loops, experiments=None, methods=None, strategies=None) -> dict:
    """CPU seconds per replicate of every job kind (of the given experiments, methods and strategies only, if
    given)."""
    costs, compiled = {}, set()
    for experiment, run in resolve(config).items():
        if experiments and experiment not in experiments:
            continue
        setting = run.settings[0]
        for method in run.methods:
            if methods and method not in methods:
                continue
            for hyper in run.hyperparameters:
                for strategy in run.strategies_of(method):
                    if strategies and strategy not in strategies:
                        continue
                    params = dict(config.get("method_params", {}).get(method, {}))
                    scale, n_steps = 1.0, run.n_steps
                    if "n_samples" in METHODS[method].parameter_names():  # a sampler: cost linear in sweeps
                        n_samples = params.get("n_samples", PAPER_N_SAMPLES)
                        burn_in = params.get("burn_in", PAPER_BURN_IN)
                        params.update(n_samples=max(n_samples // GIBBS_FRACTION, 1),
                                      burn_in=burn_in // GIBBS_FRACTION)
                        scale *= GIBBS_FRACTION
                    if experiment in short_loops and n_steps > mnist_steps:
                        scale *= n_steps / mnist_steps * GROWTH
                        n_steps = mnist_steps
                    job = dict(method_params=params, n_steps=n_steps, data_options=dict(run.experiment.options),
                               hyperparameters=hyper)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        if method not in compiled:  # numba compiles on first use; not part of a job's cost
                            run_job(experiment, setting, method, strategy, [0], **job)
                            compiled.add(method)
                        start = time.process_time()
                        run_job(experiment, setting, method, strategy, [0], **job)
                        seconds = (time.process_time() - start) * scale
                    key = jb.cost_key(experiment, method, hyper, strategy)
                    costs[key] = round(seconds, 3)
                    print(f"{key}: {seconds:.2f} s per replicate", flush=True)
    return costs


def from_run(config: dict, results: Path) -> dict:
    """CPU seconds per replicate of every job kind a workflow run of ``config`` left benchmark files for."""
    import csv

    costs = {}
    for job in jb.resolve_jobs(config).values():
        path = Path(jb.job_file(str(results), "benchmarks", job.name))
        if not path.exists():
            continue
        with path.open() as f:
            cpu = float(next(csv.DictReader(f, delimiter="\t"))["cpu_time"])
        key = jb.job_cost_key(job)
        costs[key] = round(max(costs.get(key, 0.0), cpu / len(job.replicates)), 3)
        print(f"{key}: {cpu / len(job.replicates):.1f} s per replicate ({path.name})", flush=True)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="config/paper.yaml")
    parser.add_argument("--measure", action="store_true")
    parser.add_argument("--from-run", type=Path, metavar="RESULTS",
                        help="store the costs from the benchmark files of this workflow run of --config")
    parser.add_argument("--mnist-steps", type=int, default=16)
    parser.add_argument("--short-loops", nargs="*", default=["E5", "E6"],
                        help="experiments whose design loops are measured for --mnist-steps steps and scaled up")
    parser.add_argument("--experiments", nargs="*", help="measure only these (the other stored costs are kept)")
    parser.add_argument("--methods", nargs="*", help="measure only these (the other stored costs are kept)")
    parser.add_argument("--strategies", nargs="*", help="measure only these (the other stored costs are kept)")
    args = parser.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    if args.measure or args.from_run:
        if args.from_run:
            costs = from_run(config, args.from_run)
        else:
            with threadpool_limits(1):
                costs = measure(config, args.mnist_steps, args.short_loops, args.experiments, args.methods,
                                args.strategies)
        stored = jb.load_job_costs()
        stored.update(costs)
        meta = {"machine": f"{platform.processor() or platform.machine()}, {platform.python_version()}, 1 BLAS thread",
                "measured": time.strftime("%Y-%m-%d"), "config": args.config,
                "how": f"python benchmarks/bench_job_costs.py --config {args.config} "
                       + (f"--from-run {args.from_run}" if args.from_run else "--measure")}
        try:  # notes on how particular costs were measured are kept
            about = json.loads(jb.JOB_COSTS_FILE.read_text()).get("about", {})
        except (OSError, ValueError):
            about = {}
        if args.experiments or args.methods or args.strategies:  # a part: the whole file's provenance stands
            command = " ".join(["python benchmarks/bench_job_costs.py", *sys.argv[1:]])
            about.setdefault("partial measurements", []).append(f"{meta['measured']}: {command} ({meta['machine']})")
        else:
            about.update(meta)
        jb.JOB_COSTS_FILE.write_text(json.dumps({"about": about, "seconds_per_replicate": dict(sorted(stored.items()))},
                                                indent=1) + "\n")
        jb._stored_job_costs.cache_clear()  # read back what was just written
    costs = jb.load_job_costs()
    jobs = list(jb.resolve_jobs(config).values())
    by_experiment, missing = defaultdict(float), set()
    longest = (0.0, "", None)
    for job in jobs:
        seconds = jb.job_cpu_seconds(job, costs)
        if seconds is None:
            missing.add(jb.cost_key(job.experiment, job.method, job.hyperparameters, job.strategy))
            continue
        by_experiment[job.experiment] += seconds
        if seconds > longest[0]:
            longest = (seconds, job.name, job)
    print(f"{args.config}: {len(jobs)} jobs")
    print("| experiment | CPU hours |\n|---|---:|")
    for experiment, seconds in by_experiment.items():
        print(f"| {experiment} | {seconds / 3600:.1f} |")
    print(f"| total | {sum(by_experiment.values()) / 3600:.1f} |")
    if longest[2] is not None:
        print(f"longest job: {longest[1]} ({longest[0] / 60:.0f} CPU minutes; first-attempt runtime asked: "
              f"{jb.job_runtime_minutes(longest[2], costs)} min)")
    if missing:
        print(f"no stored cost for {len(missing)} job kinds (run --measure): {sorted(missing)[:5]} ...")


if __name__ == "__main__":
    main()
