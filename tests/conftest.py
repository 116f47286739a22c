"""pytest configuration for pimloader's tests.  Shared helpers live in tests/_helpers.py
(importable by spawn-context worker processes)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # _helpers must be importable here and in spawned children
    sys.path.insert(0, HERE)

import _helpers  # noqa: E402


@pytest.fixture
def leak_check():
    """Snapshot of child processes, /dev/shm and open fds; call .assert_clean()."""
    return _helpers.Snapshot()
