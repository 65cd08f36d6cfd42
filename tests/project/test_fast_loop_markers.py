"""The fast loop's rule (tests/conftest.py): a test that scripts/test --fast runs may not
start a Python process; one marked `processes` (or build, engine, corpus) may."""

import subprocess
import sys

import conftest
import pytest


class _Test:
    """What the rule reads of a test: its id and markers."""

    def __init__(self, *markers: str):
        self.nodeid = "tests/test_example.py::test_example"
        self._markers = set(markers)

    def get_closest_marker(self, name):
        return name if name in self._markers else None


def _running(test, monkeypatch):
    monkeypatch.setattr(conftest, "_current", [test])
    monkeypatch.delenv("KERNEL_MATRIX_RECORD_PROCESSES", raising=False)


def test_an_unmarked_test_that_starts_python_fails_naming_the_marker(monkeypatch):
    _running(_Test(), monkeypatch)
    named = r"test_example starts a Python process .*mark it @pytest.mark.processes"
    with pytest.raises(pytest.fail.Exception, match=named):
        subprocess.run([sys.executable, "-c", "pass"])


def test_a_python_script_counts_and_other_programs_do_not(monkeypatch, tmp_path):
    _running(_Test(), monkeypatch)
    script = tmp_path / "tool"
    script.write_text(f"#!{sys.executable}\nprint('ran')\n")
    script.chmod(0o755)
    with pytest.raises(pytest.fail.Exception, match="starts a Python process"):
        subprocess.run([script])
    assert subprocess.run(["true"]).returncode == 0


@pytest.mark.parametrize("marker", ["processes", "build", "engine", "corpus"])
def test_a_marked_test_may_start_python(marker, monkeypatch):
    _running(_Test(marker), monkeypatch)
    assert subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout == "42\n"


def test_recording_lists_the_test_instead_of_failing(monkeypatch, tmp_path):
    """KERNEL_MATRIX_RECORD_PROCESSES: how the markers were first found (one fast run, recorded)."""
    _running(_Test(), monkeypatch)
    record = tmp_path / "record.tsv"
    monkeypatch.setenv("KERNEL_MATRIX_RECORD_PROCESSES", str(record))
    subprocess.run([sys.executable, "-c", "pass"])
    assert record.read_text() == f"tests/test_example.py::test_example\t{sys.executable}\n"
