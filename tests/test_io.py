"""The small file helpers every checkpoint and kept result shares (adaptcs._io)."""

import warnings

import numpy as np
import pytest

from adaptcs._io import read_checked_npz, read_or_discard, write_checked_npz


def test_read_or_discard_reads_a_good_file_and_removes_a_damaged_one_with_a_warning_at_the_caller(tmp_path):
    path = tmp_path / "state.npz"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_or_discard(path, read_checked_npz, what="state", instead="starting again") is None  # no file
        write_checked_npz(path, {"x": np.arange(3)})
        assert np.array_equal(read_or_discard(path, read_checked_npz, what="state", instead="again")["x"],
                              np.arange(3))
    assert path.exists()

    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01  # one flipped bit: the zip's CRC or the SHA-256 catches it
    path.write_bytes(bytes(raw))
    with pytest.warns(RuntimeWarning, match=r"state\.npz: kept state not usable \(\w+: .+\); starting again") as got:
        assert read_or_discard(path, read_checked_npz, what="kept state", instead="starting again",
                               stacklevel=1) is None
    assert not path.exists() and got[0].filename == __file__  # attributed as the caller asked, not to _io


def test_read_or_discard_discards_what_the_caller_s_own_check_refuses(tmp_path):
    path = tmp_path / "state.npz"
    write_checked_npz(path, {"format": np.int64(1)})

    def read(p):
        if int(read_checked_npz(p)["format"]) != 2:
            raise ValueError("format 1, not 2")
        return "read"

    with pytest.warns(RuntimeWarning, match=r"not usable \(ValueError: format 1, not 2\); the loop starts again"):
        assert read_or_discard(path, read, what="checkpoint", instead="the loop starts again") is None
    assert not path.exists()
