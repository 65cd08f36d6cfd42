"""CI's gate and the full run (tests/tiers.py): what the gate leaves out is named, exists and
is left out; everything else is in it."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import REPO
from tiers import FULL_ONLY, full_only

_KEY = re.compile(r"(?P<module>tests/[\w/]+\.py)(?:::(?P<test>\w+)(?:\[(?P<param>[^\]]+)\])?)?")


@pytest.mark.parametrize("key", sorted(FULL_ONLY))
def test_every_test_the_gate_leaves_out_exists_and_says_why(key):
    match = _KEY.fullmatch(key)
    assert match, f"{key}: not a module, a test or a parameter of one"
    module = REPO / match["module"]
    assert module.is_file(), f"{key}: no such module (renamed? then rename it in tests/tiers.py too)"
    if match["test"]:
        assert re.search(rf"^def {match['test']}\(", module.read_text(), re.MULTILINE), f"{key}: no such test"
    assert FULL_ONLY[key].strip(), f"{key}: say why it waits for the full run"


def test_a_key_names_its_test_and_parameters_not_a_test_whose_name_begins_with_it():
    key = "tests/test_native_build.py::test_changed_sources_give_a_new_namespace"
    assert full_only(key) and full_only(key + "[cpu]")
    assert not full_only(key + "_twice") and not full_only("tests/test_native_build.py::test_other")
    assert full_only("tests/test_first_run.py::test_anything") and not full_only("tests/test_first_run_two.py::t")


@pytest.mark.processes
def test_the_gate_collects_no_test_of_the_full_run_and_the_full_run_collects_them_all():
    def collected(*marks: str) -> set[str]:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *marks],
            cwd=REPO, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        return {line for line in result.stdout.splitlines() if "::" in line}

    gate = collected("-m", "not corpus_full and not full")  # scripts/test's own selection
    full = collected()  # scripts/test --full: addopts' -m alone
    fast = collected("-m", "not build and not engine and not corpus and not corpus_full and not processes")
    left_out = full - gate
    assert left_out and all(full_only(test) for test in left_out)
    assert fast < gate  # a module's cheap tests stay in the gate
    assert {key for key in FULL_ONLY if any(full_only(t) and t.startswith(key) for t in left_out)} == set(FULL_ONLY)
    # The gate still builds: img2gray natively and a cell in a container.
    assert any(
        t.startswith("tests/test_kernel_suite.py::test_kernel_suite_passes_against_the_built_variant") for t in gate
    )
    assert "tests/test_container_build.py::test_a_cell_builds_in_a_container_and_loads_on_the_host" in gate
