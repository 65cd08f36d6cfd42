"""Issue 39 item 3: `kernel-matrix test` handed a kernel's own tests everything: the
whole environment (HF_TOKEN, a PIP_INDEX_URL with a password) and the real HOME (its Hub
token file); a test wrote them to a file. A pull request's tests are an attacker's: here
the suite writes what it can see, and none of it is a secret."""

import json
import os
from pathlib import Path

import pytest
from conftest import kernel_matrix
from test_suite_environment import PACKAGE, python_only_kernel, python_only_variant

from kernel_matrix.checking import confine

# The kernel's suite: what an attacker's test would send away, through the real Hub client too.
EXFILTRATE = """
import json, os, pathlib


def test_exfiltrate():
    from huggingface_hub import get_token

    seen = {"environ": dict(os.environ), "home": str(pathlib.Path.home()), "token": get_token()}
    netrc = pathlib.Path.home() / ".netrc"
    seen["netrc"] = netrc.read_text() if netrc.exists() else None
    # Printed (the run passes -s): the suite may write nowhere outside its own folders.
    print("SUITE-DUMP", json.dumps(seen))
"""

TOKEN = "hf_EnvTokenThatMustNotLeak0000000"
FILE_TOKEN = "hf_FileTokenThatMustNotLeak00000"
PASSWORD = "hunter2-index-password"


@pytest.mark.processes
def test_the_suite_gets_no_secret_and_a_home_of_its_own_under_the_build_dir(tmp_path):
    kernel = python_only_kernel(tmp_path, "pure", {"test_exfiltrate.py": EXFILTRATE})
    build = tmp_path / "build"
    variant = python_only_variant(build, "pure")
    home = tmp_path / "home"  # the user's: a Hub token file and a .netrc, as a developer's machine has
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text(FILE_TOKEN)
    (home / ".netrc").write_text(f"machine index.example login user password {PASSWORD}\n")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HF_")},
        "HOME": str(home),
        "HF_TOKEN": TOKEN,
        "HUGGING_FACE_HUB_TOKEN": TOKEN,
        "GITHUB_TOKEN": "ghs_" + TOKEN,
        "ACTIONS_RUNTIME_TOKEN": "runtime-" + TOKEN,
        "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "oidc-" + TOKEN,
        "GITHUB_ENV": str(tmp_path / "github-env"),
        "DATABASE_PASSWORD": PASSWORD,
        "PIP_INDEX_URL": f"https://user:{PASSWORD}@index.example/simple",
        "PIP_EXTRA_INDEX_URL": f"https://__token__:{PASSWORD}@extra.example/simple https://open.example/simple",
        "KERNEL_MATRIX_DEPS_CACHE": str(tmp_path / "deps"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    homes = []
    for _ in range(2):
        result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), "--pytest-arg=-s", env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
        (text,) = [line.partition("SUITE-DUMP ")[2] for line in result.stdout.splitlines() if "SUITE-DUMP " in line]
        for secret in (TOKEN, FILE_TOKEN, PASSWORD):
            assert secret not in text
        seen = json.loads(text)
        environ = seen["environ"]
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "GITHUB_TOKEN", "GITHUB_ENV", "DATABASE_PASSWORD"):
            assert name not in environ
        assert not [name for name in environ if name.startswith(("ACTIONS_", "KERNEL_MATRIX_DEPS"))]
        assert seen["token"] is None and seen["netrc"] is None
        # The indexes stay named, without their credentials.
        assert environ["PIP_INDEX_URL"] == "https://index.example/simple"
        assert environ["PIP_EXTRA_INDEX_URL"] == "https://extra.example/simple https://open.example/simple"
        # HOME, and the caches that follow it, are the suite's own, under the build folder.
        suite_home = seen["home"]
        assert environ["HOME"] == suite_home and Path(suite_home).is_relative_to(build.resolve())
        for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HF_HOME"):
            assert environ[name].startswith(suite_home + os.sep), name
        assert environ["HF_HUB_OFFLINE"] == "1"
        homes.append(suite_home)
    # A fresh HOME each run, removed after it.
    assert homes[0] != homes[1] and not any(os.path.exists(h) for h in homes)


# The kernel's suite: tries to write where later builds of other code read (issue 39's "cannot
# write into the object cache or the dependency cache"), and where a test may write.
SCRIBBLE = """
import json, os, pathlib, tempfile


def attempt(path):
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"planted by a kernel's test")
        return "wrote"
    except OSError as exc:
        return type(exc).__name__


def test_scribble(tmp_path):
    targets = json.loads(os.environ["TARGETS"])
    seen = {name: attempt(pathlib.Path(path)) for name, path in targets.items()}
    seen["tmp_path"] = attempt(tmp_path / "scratch.bin")
    seen["tempfile"] = attempt(pathlib.Path(tempfile.mkdtemp()) / "scratch.bin")
    seen["home"] = attempt(pathlib.Path.home() / ".cache" / "torch" / "scratch.bin")
    print("SUITE-WRITES", json.dumps(seen))
"""


@pytest.mark.processes
def test_the_suite_cannot_write_into_the_caches_or_other_variants(tmp_path):
    if confine._landlock()[0] is None:
        pytest.skip(f"this machine cannot confine writes: {confine._landlock()[2]}")
    kernel = python_only_kernel(tmp_path, "scribbler", {"test_scribble.py": SCRIBBLE})
    build = tmp_path / "build"
    variant = python_only_variant(build, "scribbler")
    other = python_only_variant(tmp_path / "other-build", "other")
    objects = build / ".cache" / "objects" / "trusted" / "scribbler"
    objects.mkdir(parents=True)
    deps = tmp_path / "deps"
    targets = {
        "object cache": objects / ("0" * 64),
        "a new cache scope": build / ".cache" / "objects" / "trusted" / "victim" / "manifest.json",
        "dependency cache": deps / "cutlass" / "include" / "cute.hpp",
        "another variant": other / "__init__.py",
        "real home": Path.home() / "kernel-matrix-suite-was-here",
        # /proc is writable (the CUDA driver writes there): its magic links lead nowhere new.
        "the object cache through /proc/self/root": Path("/proc/self/root", *objects.parts[1:], "1" * 64),
    }
    env = {**os.environ, "TARGETS": json.dumps({k: str(v) for k, v in targets.items()})}
    env["KERNEL_MATRIX_DEPS_CACHE"] = str(deps)
    result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), "--pytest-arg=-s", env=env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "SUITE-WRITES " in line]
    seen = json.loads(line.partition("SUITE-WRITES ")[2])
    assert {name: seen[name] for name in targets} == dict.fromkeys(targets, "PermissionError")
    for name, path in targets.items():
        assert name == "another variant" or not path.exists(), path
    assert (other / "__init__.py").read_text() == PACKAGE
    # What a test may write (its tmp_path, tempfile's folder, its HOME's caches) it still can.
    assert (seen["tmp_path"], seen["tempfile"], seen["home"]) == ("wrote", "wrote", "wrote")


def test_where_writes_cannot_be_confined_it_says_why(monkeypatch):
    monkeypatch.setattr(confine.sys, "platform", "darwin")
    with confine.writes_confined_to([Path.cwd()]) as confinement:
        assert confinement.preexec_fn is None
        assert confinement.missing == "darwin has no Landlock"


@pytest.mark.processes
def test_the_gpu_probe_sees_the_machine_as_the_confined_suite_does(tmp_path):
    """gpu_check asks the tests' interpreter for its GPU confined as the suite will be, so that a
    confinement that hides the GPU (it once did: confine.py's /proc) shows as no GPU, not a pass."""
    if confine._landlock()[0] is None:
        pytest.skip(f"this machine cannot confine writes: {confine._landlock()[2]}")
    from kernel_matrix.checking import testing

    attempt = (
        "import json, pathlib, sys\n"
        "try:\n    pathlib.Path(sys.argv[1]).write_text('x')\n    print(json.dumps('wrote'))\n"
        "except OSError:\n    print(json.dumps('refused'))\n"
    )
    target = tmp_path / "probe-was-here"
    assert testing._probe(None, attempt, str(target), timeout=60, confined=True) == "refused"
    assert not target.exists()
    assert testing._probe(None, attempt, str(target), timeout=60) == "wrote"
