"""Checks, before any job is submitted, that a SLURM run will be able to see its jobs finish.

snakemake-executor-plugin-slurm polls job states with ``sacct`` (when the command exists) or ``squeue``. On a
cluster without job accounting (no slurmdbd), ``sacct`` exists but only answers "accounting storage is
disabled"; the plugin logs that at debug level and waits forever. ``squeue`` works there, but only if finished
jobs stay visible long enough (slurm.conf's MinJobAge), and the plugin itself goes back to ``sacct`` when
MinJobAge is below three status intervals. :func:`check_slurm_status_command` repeats that choice and runs the
chosen command once, so that a run that would hang stops at once with what to change.
"""

from __future__ import annotations

import getpass
import re
import shutil
import subprocess

# The plugin waits this long before its first status check (its --slurm-init-seconds-before-status-checks
# default) and trusts squeue only when MinJobAge is at least three times that.
DEFAULT_INIT_SECONDS = 40


class ClusterSetupError(RuntimeError):
    """The cluster cannot report job states to the executor; the message says what to change."""


def _run(cmd: list[str]) -> tuple[int, str]:
    """Return code and stdout + stderr of a command (127 when it is not installed)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return 127, f"{cmd[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, f"{' '.join(cmd)}: no answer within 60 s"
    return proc.returncode, (proc.stdout + proc.stderr).strip()


def min_job_age_seconds() -> int | None:
    """MinJobAge from ``scontrol show config`` in seconds (None when it cannot be read)."""
    code, out = _run(["scontrol", "show", "config"])
    match = re.search(r"^MinJobAge\s*=\s*(\d+)\s*(\w*)", out, re.MULTILINE)
    if code != 0 or not match:
        return None
    value, unit = int(match.group(1)), match.group(2).lower()
    return value * 3600 if unit.startswith("h") else value * 60 if unit.startswith("min") else value


def effective_status_command(requested: str | None, init_seconds: int = DEFAULT_INIT_SECONDS) -> str:
    """The status command the SLURM plugin will use: ``"sacct"`` or ``"squeue"``.

    Parameters
    ----------
    requested : {"sacct", "squeue"} or None
        ``--slurm-status-command`` (None: the plugin's default, sacct whenever the command exists).
    init_seconds : int
        ``--slurm-init-seconds-before-status-checks`` (s).
    """
    has_sacct = shutil.which("sacct") is not None
    command = requested or ("sacct" if has_sacct else "squeue")
    if command == "squeue" and has_sacct:
        age = min_job_age_seconds()
        if age is None or age < 3 * init_seconds:
            command = "sacct"
    if command == "sacct" and not has_sacct:
        command = "squeue"
    return command


def check_slurm_status_command(requested: str | None, init_seconds: int = DEFAULT_INIT_SECONDS) -> str:
    """Raise :class:`ClusterSetupError` when the SLURM plugin could not see its jobs; else the command used.

    ``sacct`` must answer a query (it does only with job accounting); ``squeue`` must answer and the cluster's
    MinJobAge must keep finished jobs visible for three status intervals.
    """
    command = effective_status_command(requested, init_seconds)
    if command == "sacct":
        code, out = _run(["sacct", "-X", "-n", "-P", "-o", "JobIdRaw", "--starttime", "now-1minutes"])
        if code != 0:
            age = min_job_age_seconds()
            fix = (f"add `--slurm-status-command squeue` (this cluster's MinJobAge is {age} s, enough)"
                   if age is not None and age >= 3 * init_seconds else
                   f"ask for job accounting, or for MinJobAge >= {3 * init_seconds} s in slurm.conf (it is "
                   f"{age if age is not None else 'unknown'}) and add `--slurm-status-command squeue`")
            raise ClusterSetupError(
                f"The SLURM executor would poll job states with sacct, which fails here ({out or f'exit {code}'}); "
                f"the run would wait forever for jobs it cannot see. Without job accounting (slurmdbd): {fix}.")
    else:
        code, out = _run(["squeue", "-h", "-o", "%i", "-u", getpass.getuser()])
        if code != 0:
            raise ClusterSetupError(f"The SLURM executor would poll job states with squeue, which fails here: "
                                    f"{out or f'exit {code}'}.")
        age = min_job_age_seconds()
        if age is not None and age < 3 * init_seconds:
            raise ClusterSetupError(
                f"squeue forgets finished jobs after MinJobAge = {age} s, less than the {3 * init_seconds} s the "
                f"SLURM executor needs, and sacct is not installed: ask for job accounting or a longer MinJobAge.")
    return command
