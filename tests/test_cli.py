"""The command line: names without imports, start-up, input files, pipes."""

import subprocess
import sys

import numpy as np
import pytest

from adaptcs import _names
from adaptcs._io import StateError
from adaptcs.readers import read_numbers


def test_the_command_lines_names_are_the_registries():
    from adaptcs.bases.images import BASES
    from adaptcs.data.mnist import SOURCES
    from adaptcs.design.basis_scan import REPLAY_ORDERS
    from adaptcs.experiments import EXPERIMENTS, STRATEGIES
    from adaptcs.models.registry import HYPERPARAMETERS, METHODS
    from adaptcs.replay import PRIORS

    assert _names.EXPERIMENTS == tuple(EXPERIMENTS) and _names.METHODS == tuple(METHODS)
    assert _names.STRATEGIES == tuple(STRATEGIES) and _names.HYPERPARAMETERS == tuple(HYPERPARAMETERS)
    assert _names.MNIST_SOURCES == tuple(SOURCES) and _names.BASES == tuple(BASES)
    assert _names.REPLAY_ORDERS == tuple(REPLAY_ORDERS) and _names.REPLAY_PRIORS == tuple(PRIORS)
    assert _names.method_order() == list(METHODS)
    from adaptcs.mri.design import FIXED_MASKS
    from adaptcs.mri.replay import PRIORS as MRI_PRIORS

    assert _names.MRI_PRIORS == MRI_PRIORS and _names.MRI_ORDERS == ("design", *FIXED_MASKS)


def test_help_imports_nothing_numerical():
    """--help of every command answers without numpy, scipy, pandas or h5py (about 0.08 CPU s instead of 1.6)."""
    code = ("import sys\nfrom adaptcs.cli import main\n"
            "for argv in (['--help'], ['table', '--help'], ['design', 'next', '--help'], ['replay', '--help'],\n"
            "             ['lab', '--help'], ['lab', '--instrument', 'mri', 'init', '--help'],\n"
            "             ['replay', '--instrument', 'camera', '--help'], ['mri', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in ('numpy', 'scipy', 'pandas', 'h5py', 'sklearn') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout + done.stderr
    assert "``" not in done.stdout and "::" not in done.stdout  # plain text, no reStructuredText
    assert "--replicates 0:50 \\\n        --out" in done.stdout  # a continued example line stays two lines


def test_rows_files_take_commas_spaces_tabs_a_header_and_comments(tmp_path):
    expected = np.array([[1.0, 2.5, -3.0], [4.0, 5.0, 6e-3]])
    for text in ("1,2.5,-3\n4,5,6e-3\n", "1 2.5 -3\n4  5 6e-3\n", "1\t2.5\t-3\n4\t5\t6e-3\n",
                 "a,b,c\n1, 2.5, -3\n4 ,5,6e-3\n", "# measured today\nx y z\n1 2.5 -3  # first\n\n4 5 6e-3\n"):
        (tmp_path / "rows.csv").write_text(text)
        np.testing.assert_array_equal(read_numbers(tmp_path / "rows.csv", "rows"), expected, err_msg=text)
    for text, match in (("1,2\n3,x\n", "line 2 has 'x'"), ("1,2\n3\n", "line 2 has 1 numbers"),
                        ("a,b\n", "only the line 'a,b'"), ("1,2\n1,,2\n", "line 2 has ''"), ("", "is empty")):
        (tmp_path / "rows.csv").write_text(text)
        with pytest.raises(StateError, match=match):
            read_numbers(tmp_path / "rows.csv", "rows")


def test_a_closed_pipe_is_not_an_error():
    """``python -m adaptcs settings E5 | head -1``: the reader goes away first; no 'Broken pipe', exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "adaptcs", "settings", "E5"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()  # before the command has written anything
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, stderr
    assert "Broken pipe" not in stderr and "Traceback" not in stderr


def test_an_unknown_config_key_is_one_line_with_the_nearest_known_one():
    from adaptcs.config import check_known_keys

    for config, message in (
            ({"resuts": "x", "experiments": {}}, "config: unknown key resuts; did you mean 'results'?"),
            ({"experiments": {"E3": {"replicates": 2, "methods": ["gss_ep"], "n_step": 3}}},
             "unknown key experiments.E3.n_step; did you mean 'n_steps'?"),
            ({"mnist": {"sorce": "embedded"}, "experiments": {}}, "unknown key mnist.sorce; did you mean 'source'?"),
            ({"experiments": {"mine": {"kind": "user", "data": {"image": "x"}, "replicates": 1, "methods": ["a"]}}},
             "unknown key experiments.mine.data.image; did you mean 'images'?")):
        with pytest.raises(ValueError) as info:
            check_known_keys(config)
        assert message in str(info.value) and "\n" not in str(info.value)
    check_known_keys({"experiments": {"E1": {"replicates": 2, "methods": ["gss_ep"]}},
                      "method_params": {"gss_ep": {"tol": 1e-5}}})  # known keys pass
