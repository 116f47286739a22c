"""benchmarks/harness.py's output helpers: a warning shown once per run, not once per loader,
and a constructor's chatter on standard output dropped while its result and errors pass."""
import warnings

import pytest

from benchmarks import harness


def warn_from_two_places(message: str) -> None:
    warnings.warn(message, UserWarning)
    warnings.warn(message, UserWarning)


def test_a_repeated_user_warning_is_shown_once_and_others_still_show():
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()  # Python's default: once per call site
        with harness.warnings_once():
            for _ in range(3):
                warn_from_two_places("pimloader: the DPU kernel does not pad")
            warn_from_two_places("another")
    assert [str(w.message) for w in caught] == ["pimloader: the DPU kernel does not pad",
                                                "another"]


def chatty(value):
    print("loading annotations into memory...")
    if value is None:
        raise ValueError("no value")
    return value * 2


def test_silenced_drops_prints_and_keeps_the_result_and_the_error(capsys):
    assert harness.silenced(chatty, 21) == 42
    with pytest.raises(ValueError, match="no value"):
        harness.silenced(chatty, None)
    assert capsys.readouterr().out == ""
    print("after")
    assert capsys.readouterr().out == "after\n"


def test_filters_set_before_still_apply():
    with warnings.catch_warnings(record=True) as caught:
        warnings.resetwarnings()
        warnings.filterwarnings("ignore", message="pimloader: the DPU kernel")
        with harness.warnings_once():
            warn_from_two_places("pimloader: the DPU kernel does not pad")
        warnings.simplefilter("error")
        with harness.warnings_once(), pytest.raises(UserWarning, match="another"):
            warn_from_two_places("another")
    assert caught == []
