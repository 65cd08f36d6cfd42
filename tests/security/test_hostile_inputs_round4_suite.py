"""Issue 39 item 3: `kernel-matrix test` handed a kernel's own tests everything: the
whole environment (HF_TOKEN, a PIP_INDEX_URL with a password) and the real HOME (its Hub
token file); a test wrote them to a file. A pull request's tests are an attacker's: here
the suite writes what it can see, and none of it is a secret."""

import json
import os
from pathlib import Path

from conftest import kernel_matrix
from test_suite_environment import python_only_kernel, python_only_variant

# The kernel's suite: what an attacker's test would send away, through the real Hub client too.
EXFILTRATE = """
import json, os, pathlib


def test_exfiltrate():
    from huggingface_hub import get_token

    seen = {"environ": dict(os.environ), "home": str(pathlib.Path.home()), "token": get_token()}
    netrc = pathlib.Path.home() / ".netrc"
    seen["netrc"] = netrc.read_text() if netrc.exists() else None
    pathlib.Path(os.environ["SUITE_DUMP"]).write_text(json.dumps(seen))
"""

TOKEN = "hf_EnvTokenThatMustNotLeak0000000"
FILE_TOKEN = "hf_FileTokenThatMustNotLeak00000"
PASSWORD = "hunter2-index-password"


def test_the_suite_gets_no_secret_and_a_home_of_its_own_under_the_build_dir(tmp_path):
    kernel = python_only_kernel(tmp_path, "pure", {"test_exfiltrate.py": EXFILTRATE})
    build = tmp_path / "build"
    variant = python_only_variant(build, "pure")
    home = tmp_path / "home"  # the user's: a Hub token file and a .netrc, as a developer's machine has
    (home / ".cache" / "huggingface").mkdir(parents=True)
    (home / ".cache" / "huggingface" / "token").write_text(FILE_TOKEN)
    (home / ".netrc").write_text(f"machine index.example login user password {PASSWORD}\n")
    dump = tmp_path / "dump.json"
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
        "SUITE_DUMP": str(dump),
    }
    homes = []
    for _ in range(2):
        result = kernel_matrix("test", str(variant), "--kernel-dir", str(kernel), env=env)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
        text = dump.read_text()
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
        assert environ["HF_HUB_OFFLINE"] == "1" and environ["SUITE_DUMP"] == str(dump)
        homes.append(suite_home)
    # A fresh HOME each run, removed after it.
    assert homes[0] != homes[1] and not any(os.path.exists(h) for h in homes)
