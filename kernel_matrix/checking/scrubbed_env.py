"""The environment a kernel's own code runs in, wherever kernel-matrix runs it (the load
check's import, `kernel-matrix test`'s suite): one definition of what it never gets.

- No secret: no variable whose name says it holds one (HF_TOKEN, HUGGING_FACE_HUB_TOKEN,
  GITHUB_TOKEN, TWINE_PASSWORD, AWS_SECRET_ACCESS_KEY, SSH_AUTH_SOCK, ...), none of the
  GitHub runner's ACTIONS_* (its runtime and OIDC tokens), none of the files through which a
  step sets the job's later environment and outputs (GITHUB_ENV, GITHUB_OUTPUT, ...), and no
  user:password@ in any URL (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, proxies): the URL stays.
- A HOME of its own (an empty folder the caller makes), with the XDG folders and the Hub's
  under it: no token file (~/.cache/huggingface/token), ~/.netrc, pip.conf or
  ~/.git-credentials is found, and the Hub is offline.
- None of kernel-matrix's own settings (KERNEL_MATRIX_*): the dependency cache
  (KERNEL_MATRIX_DEPS_CACHE, else under XDG_CACHE_HOME) is not named to it.

What this does not do: the code still runs as this user, who can read whatever that user
can (the real HOME is in /etc/passwd). Where it may write is confine.py's job (Landlock:
its HOME, scratch and the variant it tests, not the caches); and the caches are checked at
the moment of use all the same: an object against the hash it is named by, a dependency
tree against the digest of its files."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

# Words that, anywhere in a variable's name, say it holds a secret.
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE", "ASKPASS", "COOKIE")
# Parts of a name (between underscores) that do: AWS_ACCESS_KEY_ID, SSH_AUTH_SOCK, NPM_CONFIG__AUTH.
SECRET_PARTS = frozenset({"KEY", "APIKEY", "AUTH", "PASS", "PAT"})
# Prefixes of names that are secrets or hand out the job's powers: the GitHub runner's runtime
# (ACTIONS_RUNTIME_TOKEN, ACTIONS_ID_TOKEN_REQUEST_URL, the cache and results services), and
# kernel-matrix's own settings (where its caches are).
DROPPED_PREFIXES = ("ACTIONS_", "KERNEL_MATRIX_")
# Named one by one: files a GitHub Actions step writes to change the job's later steps
# (their environment, PATH, outputs, summary), where credentials are read from, and the
# Hub's shared caches (what a later step loads from the Hub offline comes from there).
DROPPED = frozenset(
    {
        "GITHUB_ENV",
        "GITHUB_PATH",
        "GITHUB_OUTPUT",
        "GITHUB_STATE",
        "GITHUB_STEP_SUMMARY",
        "NETRC",
        "PIP_CONFIG_FILE",
        "PIP_CERT",
        "PIP_CLIENT_CERT",
        "DOCKER_CONFIG",
        "GIT_CONFIG_GLOBAL",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "HF_XET_CACHE",
        "HF_ASSETS_CACHE",
    }
)
# user:password@ (or a token as the user) after a URL's scheme, up to the host.
URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]*@")


def withheld(name: str) -> bool:
    """Whether the variable `name` is one a kernel's code never gets."""
    upper = name.upper()
    return (
        upper in DROPPED
        or upper.startswith(DROPPED_PREFIXES)
        or any(word in upper for word in SECRET_WORDS)
        or not SECRET_PARTS.isdisjoint(upper.split("_"))
    )


def without_credentials(value: str) -> str:
    """value with every URL's user:password@ removed (PIP_EXTRA_INDEX_URL holds several)."""
    return URL_CREDENTIALS.sub(r"\g<scheme>", value)


def scrubbed_environment(
    home: Path, *, inherit: Iterable[str] | None = None, source: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment for a kernel's code: source's (os.environ; only the names in
    `inherit` where given) less every secret, HOME and the caches' folders under `home`
    (an empty folder of its own), the Hub offline and with no token."""
    environ = os.environ if source is None else source
    names = environ.keys() if inherit is None else [n for n in inherit if n in environ]
    env = {name: without_credentials(environ[name]) for name in names if not withheld(name)}
    if "PYTHONUSERBASE" not in env:
        # pip install --user's packages stay importable though HOME moves (no secret lives there).
        user_base = Path(environ.get("HOME") or Path.home()) / ".local"
        if user_base.is_dir():
            env["PYTHONUSERBASE"] = str(user_base)
    env |= {
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "HF_HOME": str(home / ".cache" / "huggingface"),
        "HF_TOKEN_PATH": os.devnull,
        "HF_HUB_OFFLINE": "1",
    }
    return env
