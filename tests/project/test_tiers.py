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
    key = "tests/building/test_native_build.py::test_changed_sources_give_a_new_namespace"
    assert full_only(key) and full_only(key + "[cpu]")
    assert not full_only(key + "_twice") and not full_only("tests/building/test_native_build.py::test_other")
    assert full_only("tests/end_to_end/test_first_run.py::test_anything") and not full_only(
        "tests/test_first_run_two.py::t"
    )


@pytest.mark.processes
def test_what_the_gate_leaves_out_is_what_tiers_names_and_it_still_builds():
    """One collection (a second costs 10 s): the full run's own tests are those tiers.py names,
    each key names some, and the gate keeps a native build and suite and a container cell."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "full"],
        cwd=REPO, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    left_out = {line for line in result.stdout.splitlines() if "::" in line}
    assert left_out and all(full_only(test) for test in left_out)
    assert {key for key in FULL_ONLY if any(full_only(t) and t.startswith(key) for t in left_out)} == set(FULL_ONLY)
    kept = [
        "tests/checking/test_kernel_suite.py::test_kernel_suite_passes_against_the_built_variant[cpu]",
        "tests/containers/test_container_build.py::test_a_cell_builds_in_a_container_and_loads_on_the_host",
        "tests/releasing/test_reuse.py::test_a_container_cell_takes_the_published_variant_its_host_verified",
        "tests/checking/test_loader_versions.py::test_kernel_matrix_installs_plans_and_tests_a_variant_with_the_loader[0.17.2]",
    ]
    assert not any(full_only(test) for test in kept)
