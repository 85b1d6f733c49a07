"""Tests of neuroevo.core.files.try_lock: one holder at a time, freed on close, never through
a link."""

import errno

import pytest

from neuroevo.core.files import try_lock


def test_one_holder_at_a_time_freed_on_close(tmp_path):
    path = tmp_path / "lock"
    first = try_lock(path)
    assert first is not None
    assert try_lock(path) is None  # another open file of the same process counts too
    first.close()
    second = try_lock(path)
    assert second is not None
    second.close()


def test_a_link_at_the_lock_path_is_refused(tmp_path):
    target = tmp_path / "precious"
    target.write_text("mine")
    (tmp_path / "lock").symlink_to(target)
    with pytest.raises(OSError) as raised:
        try_lock(tmp_path / "lock")
    assert raised.value.errno == errno.ELOOP
    assert target.read_text() == "mine"
