"""The GitHub Actions workflows: triggers, job graph, runner labels, permissions
and secrets; the conditions that keep forks off the GPU runners and releases to
tags and the default branch, evaluated for each kind of run by a small evaluator
of GitHub's expression language; that the commands in the YAML, run as the
jobs run them, write what the next jobs read (fromJSON, artifacts, summaries);
and scripts/test-variant, the test jobs' command, run against stand-ins for pip,
torch and kernel-matrix. The linters (actionlint, zizmor, hadolint, shellcheck)
are in test_lint_gates.py."""

import fnmatch
import hashlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import REPO, cli_jobs, cli_matrix, kernel_matrix, matrix_text

from kernel_matrix.config.github_event import PULL_REQUEST_EVENTS
from kernel_matrix.planning.matrix import PROFILES, load_matrix
from kernel_matrix.running import test_variant

WORKFLOW_DIR = REPO / ".github" / "workflows"
WORKFLOWS = sorted(WORKFLOW_DIR.glob("*.yml"))
BIN = Path(sys.executable).parent  # kernel-matrix, as the jobs find it on PATH after `pip install .`

# The only actions the workflows may use, each at the commit of the release its comment names.
PINNED = {
    "actions/checkout": ("11bd71901bbe5b1630ceea73d27597364c9af683", "v4.2.2"),
    "actions/upload-artifact": ("ea165f8d65b6e75b540449e92b4886f43607fa02", "v4.6.2"),
    "actions/download-artifact": ("d3f86a106a0bac45b974a628896c90dbdf5c8093", "v4.3.0"),
    "actions/setup-python": ("a26af69be951a213d495a4c3e4e4022e16d87065", "v5.6.0"),
    # The object cache, restored and saved in two steps so that release builds do neither.
    "actions/cache/restore": ("5a3ec84eff668545956fd18022155c47e93e2684", "v4.2.3"),
    "actions/cache/save": ("5a3ec84eff668545956fd18022155c47e93e2684", "v4.2.3"),
    # kernel-matrix's own release to PyPI (release.yml): Trusted Publishing, no stored token.
    "pypa/gh-action-pypi-publish": ("76f52bc884231f62b9a034ebfe128415bbaabdfc", "v1.12.4"),
}
# "This event runs a pull request's files": one rule, the events of PULL_REQUEST_EVENTS
# (kernel_matrix/config/github_event.py), as every workflow condition writes it
# (tests/security/test_fork_runners.py holds every condition on github.event_name to it).
PULL_REQUEST_RUN = (
    f"contains(fromJSON('{json.dumps(sorted(PULL_REQUEST_EVENTS), separators=(',', ':'))}'), github.event_name)"
)
FORK_CLAUSE = f"!{PULL_REQUEST_RUN} || github.event.pull_request.head.repo.full_name == github.repository"
DEFAULT_BRANCH_CLAUSE = "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)"
# The jobs of all the workflows whose token may write, and what each may write: the kernel's
# release wheels, and kernel-matrix's own release (the GitHub release; PyPI's OIDC token).
WRITERS = {
    ("reusable-build.yml", "release-wheels"): {"contents": "write"},
    # Sigstore's keyless signing of each published variant (publish --sign): an OIDC token, no write.
    ("reusable-build.yml", "publish"): {"contents": "read", "id-token": "write"},
    # Builder images pushed to the repository's packages (builder-images --push); no code of the kernel's runs there.
    ("reusable-build.yml", "images"): {"contents": "read", "packages": "write"},
    ("release.yml", "github-release"): {"contents": "write"},
    ("release.yml", "pypi"): {"id-token": "write"},
}
# The test jobs' command as the workflows run it (scripts/test-variant runs it in this repository).
TEST_VARIANT = [sys.executable, "-m", "kernel_matrix", "test-variant"]
USAGE = test_variant.USAGE


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


# The jobs live in the reusable workflow; build.yml is kernel-matrix's own caller of it,
# as `kernel-matrix init` writes one into a kernel's repository.
BUILD = load(WORKFLOW_DIR / "reusable-build.yml")
JOBS = BUILD["jobs"]
CALLER = load(WORKFLOW_DIR / "build.yml")
RELEASE = load(WORKFLOW_DIR / "release.yml")  # kernel-matrix's own release
(CALLER_JOB,) = CALLER["jobs"].values()
REUSABLE = "./.github/workflows/reusable-build.yml"


# --- GitHub's expression language, as much of it as the workflows use -------------------------------------------


class Expression:
    """Evaluates `${{ }}` expressions: literals, context paths (missing -> null), ! == != < <= > >= && || and
    parentheses, and the functions below, with GitHub's rules: && and || return an operand, strings compare
    ignoring case, other mixed types compare as numbers."""

    TOKEN = re.compile(
        r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>\d+(?:\.\d+)?)|(?P<op>==|!=|<=|>=|&&|\|\||[()!<>,])"
        r"|(?P<name>[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*)*))"
    )
    STATUS_FUNCTIONS = ("always(", "success(", "failure(", "cancelled(")

    def __init__(self, text: str):
        self.tokens, pos, text = [], 0, text.strip()
        while pos < len(text):
            match = self.TOKEN.match(text, pos)
            assert match and match.end() > pos, f"cannot read {text[pos:]!r}"
            kind = match.lastgroup
            self.tokens.append((kind, match.group(kind)))
            pos = match.end()
        self.text = text

    def evaluate(self, context: dict):
        self.pos, self.context = 0, context
        value = self._or()
        assert self.pos == len(self.tokens), f"trailing tokens in {self.text!r}"
        return value

    def _peek(self):
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, None)

    def _take(self, op=None):
        token = self._peek()
        assert op is None or token == ("op", op), f"expected {op!r} at {token} in {self.text!r}"
        self.pos += 1
        return token

    def _or(self):
        value = self._and()
        while self._peek() == ("op", "||"):
            self._take()
            right = self._and()
            value = value if truthy(value) else right
        return value

    def _and(self):
        value = self._compare()
        while self._peek() == ("op", "&&"):
            self._take()
            right = self._compare()
            value = right if truthy(value) else value
        return value

    def _compare(self):
        value = self._unary()
        kind, op = self._peek()
        if kind == "op" and op in ("==", "!=", "<", "<=", ">", ">="):
            self._take()
            right = self._unary()
            if op in ("==", "!="):
                return equal(value, right) == (op == "==")
            a, b = number(value), number(right)
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        return value

    def _unary(self):
        if self._peek() == ("op", "!"):
            self._take()
            return not truthy(self._unary())
        return self._primary()

    def _primary(self):
        kind, value = self._take()
        if kind == "str":
            return value[1:-1].replace("''", "'")
        if kind == "num":
            return float(value)
        if (kind, value) == ("op", "("):
            inner = self._or()
            self._take(")")
            return inner
        assert kind == "name", f"unexpected {value!r} in {self.text!r}"
        if value in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[value]
        if self._peek() == ("op", "("):
            self._take()
            args = []
            while self._peek() != ("op", ")"):
                args.append(self._or())
                if self._peek() == ("op", ","):
                    self._take()
            self._take(")")
            return self._call(value, args)
        found = self.context
        for part in value.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        return found

    def _call(self, name: str, args: list):
        status = self.context.get("status")
        functions = {
            "format": lambda fmt, *rest: re.sub(r"\{(\d+)\}", lambda m: text(rest[int(m.group(1))]), fmt),
            # An array: an item equal to the value (GitHub's rule); a string: a substring.
            "contains": lambda a, b: (
                any(equal(item, b) for item in a) if isinstance(a, list) else text(b).lower() in text(a).lower()
            ),
            "startsWith": lambda a, b: text(a).lower().startswith(text(b).lower()),
            "fromJSON": lambda s: json.loads(s),
            "hashFiles": lambda *patterns: hash_files(Path(self.context["github"]["workspace"]), patterns),
            "always": lambda: True,
            "success": lambda: status == "success",
            "failure": lambda: status == "failure",
            "cancelled": lambda: status == "cancelled",
        }
        assert name in functions, f"the evaluator does not know {name}()"
        return functions[name](*args)


def hash_files(workspace: Path, patterns) -> str:
    """hashFiles(): one SHA-256 of the SHA-256s of the files under the workspace (github.workspace) that match
    any of the patterns, in path order; empty when none match."""
    files = sorted({f for p in patterns for f in workspace.glob(p) if f.is_file() and ".git" not in f.parts})
    if not files:
        return ""
    combined = hashlib.sha256()
    for file in files:
        combined.update(hashlib.sha256(file.read_bytes()).digest())
    return combined.hexdigest()


def truthy(value) -> bool:
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in (None, False, 0, "")


def number(value) -> float:
    if value is None:
        return 0.0
    if isinstance(value, bool | int | float):
        return float(value)
    try:
        return float(value) if value.strip() else 0.0
    except ValueError:
        return math.nan


def equal(a, b) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.lower() == b.lower()
    if type(a) is type(b):
        return a == b
    return number(a) == number(b)


def text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def render(value, context: dict):
    """A workflow value: a lone `${{ }}` gives the expression's value, text with some gives text."""
    if not isinstance(value, str):
        return value
    lone = re.fullmatch(r"\$\{\{((?:(?!\}\}).)*)\}\}", value.strip(), re.S)
    if lone:
        return Expression(lone.group(1)).evaluate(context)
    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: text(Expression(m.group(1)).evaluate(context)), value)


def runs(job: dict, context: dict) -> bool:
    """Whether GitHub starts the job (or step): its `if`, with success() added when it names no status
    function. A job sees the needs it names, each with its result (context["results"], success by default):
    success() is true only where every one succeeded (not where one was skipped: GitHub then skips the job),
    failure() where one failed, cancelled() where the run was cancelled. A step sees its job's status."""
    status = context["status"]
    if "needs" in job:
        needs = _needs(job)
        # The status functions read every job upstream, not only the needs (actions/runner#2205):
        # a skipped test-gpu skips what follows publish too, unless a condition says otherwise.
        upstream = {name: context["results"].get(name, "success") for name in _upstream(needs)}
        if status != "cancelled":
            if "failure" in upstream.values():
                status = "failure"
            elif any(result != "success" for result in upstream.values()):
                status = "skipped"
        seen = {name: {**context["needs"].get(name, {}), "result": upstream[name]} for name in needs}
        context = context | {"needs": seen, "status": status}
    condition = job.get("if")
    if condition is None:
        return status == "success"
    condition = re.sub(r"^\$\{\{(.*)\}\}$", r"\1", condition.strip(), flags=re.S)
    if not any(f in condition for f in Expression.STATUS_FUNCTIONS):
        condition = f"success() && ({condition})"
    return truthy(Expression(condition).evaluate(context))


def _needs(job: dict) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)


def _upstream(needs: list[str]) -> set[str]:
    """The jobs of the reusable workflow that `needs` name, and theirs, to the first."""
    found: set[str] = set()
    needs = list(needs)  # the caller's list stays as it is
    while needs:
        name = needs.pop()
        if name not in found:
            found.add(name)
            needs += _needs(JOBS.get(name, {}))
    return found


def run_context(
    kind: str,
    *,
    ref: str = "refs/heads/main",
    run_id: int = 1001,
    status: str = "success",
    results: dict[str, str] | None = None,
    **inputs,
):
    """The contexts of the reusable workflow's jobs in one kind of run of build.yml (repository owner/kernel,
    default branch main): the caller's event, and the inputs and secret its job passes. results: the jobs
    that did not succeed ("failure", "skipped"); status "cancelled": the run was cancelled."""
    github = {
        "repository": "owner/kernel",
        "repository_id": "700100",
        "run_id": run_id,
        "workflow": CALLER["name"],
        "token": "ghs_job_token",
        "event": {"repository": {"default_branch": "main"}},
    }
    if kind in ("fork-pr", "same-repo-pr", "deleted-fork-pr"):
        head = {"fork-pr": {"full_name": "someone/kernel"}, "same-repo-pr": {"full_name": "owner/kernel"}}.get(kind)
        github |= {
            "event_name": "pull_request",
            "ref": "refs/pull/7/merge",
            "ref_type": "branch",
            "ref_name": "7/merge",
        }
        github["event"]["pull_request"] = {"number": 7, "head": {"repo": head}}
    elif kind in ("push", "dispatch"):
        github |= {
            "event_name": "push" if kind == "push" else "workflow_dispatch",
            "ref": ref,
            "ref_type": "tag" if ref.startswith("refs/tags/") else "branch",
            "ref_name": ref.split("/", 2)[2],
        }
    else:
        raise ValueError(kind)
    declared = CALLER["on"]["workflow_dispatch"]["inputs"]
    values = {name: spec.get("default") for name, spec in declared.items()} if kind == "dispatch" else {}
    values |= {name.replace("_", "-"): value for name, value in inputs.items()}
    caller = {"github": github, "inputs": values, "secrets": {"HF_TOKEN": "hf_secret"}}
    called = {name: spec.get("default") for name, spec in BUILD["on"]["workflow_call"]["inputs"].items()}
    called |= {name: render(value, caller) for name, value in CALLER_JOB["with"].items()}
    secrets = {name: render(value, caller) for name, value in CALLER_JOB["secrets"].items()}
    context = {"github": github, "inputs": called, "secrets": secrets, "status": status, "results": results or {}}
    context["env"] = {name: render(value, context) for name, value in BUILD.get("env", {}).items()}
    outputs = {"jobs": '{"include":[{}]}', "gpu_jobs": '{"include":[{}]}', "wheels": "true"}
    context["needs"] = {"plan": {"outputs": outputs}}
    return context


def bash(command: str, env: dict, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """A `run:` as the runner runs it: bash -e, with the step's environment."""
    full = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", **{k: text(v) for k, v in env.items()}}
    return subprocess.run(["bash", "-e", "-c", command], cwd=cwd, env=full, capture_output=True, text=True)


def step(job: str, uses: str | None = None, run: str | None = None, index: int = 0) -> dict:
    found = [
        s
        for s in JOBS[job]["steps"]
        if (uses is None or s.get("uses", "").startswith(uses + "@"))
        and (run is None or s.get("run", "").startswith(run))
    ]
    return found[index]


# --- the rules every workflow keeps ------------------------------------------------------------------------------


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflows_are_locked_down(path):
    workflow = load(path)
    text_ = path.read_text()
    # Fork code must never run with this repository's token or secrets: no trigger that gives it them.
    assert not set(workflow["on"]) & {"pull_request_target", "workflow_run"} and "workflow_run" not in text_
    assert workflow["permissions"] == {}, "no token permission at the top: each job asks for its own"
    for name, job in workflow["jobs"].items():
        if "uses" in job:  # a caller: a reusable workflow of this repository, granting what its jobs may ask
            granted = {
                ("build.yml", REUSABLE): {"contents": "write", "id-token": "write", "packages": "write"},
                ("upstream.yml", "./.github/workflows/reusable-upstream.yml"): {"contents": "read"},
            }
            assert (path.name, job["uses"]) in granted, name
            assert job["permissions"] == granted[(path.name, job["uses"])] and "steps" not in job, name
            continue
        assert "timeout-minutes" in job, name
        if (path.name, name) in WRITERS:
            assert job["permissions"] == WRITERS[path.name, name], name
        else:
            # build reads the builder images the images job pushed (packages: read), nothing more.
            readers = {("reusable-build.yml", "build"): {"contents": "read", "packages": "read"}}
            expected = readers.get((path.name, name), {"contents": "read"})
            assert job.get("permissions", {}) in ({}, expected), f"{name} needs no write permission"
        for holder in [job.get("container"), *job.get("services", {}).values()]:
            image = holder.get("image", "") if isinstance(holder, dict) else holder
            assert image is None or "@sha256:" in image, f"{name}: a job image must be pinned by digest"
        for s in job["steps"]:
            if "uses" in s:
                action, _, commit = s["uses"].partition("@")
                assert action in PINNED, f"{name}: {action} is not one of the actions this project trusts"
                assert commit == PINNED[action][0], f"{name}: {s['uses']} is not the pinned commit"
                if action == "actions/checkout":
                    assert s["with"]["persist-credentials"] is False
                # No action caches but the build job's object cache (test_the_object_cache_...).
                assert "cache" not in s.get("with", {}), name
                in_build = (path.name, name) == ("reusable-build.yml", "build")
                assert not action.startswith("actions/cache") or in_build, name
            # Expressions reach commands through env, never by text substitution.
            assert "${{" not in s.get("run", ""), f"{name}: {s['run']}"
    # Every pinned commit carries its release in a comment, and it is the release of that commit.
    for line in text_.splitlines():
        if "uses:" in line and not re.search(r"uses: \./\.github/workflows/reusable-[a-z]+\.yml", line):
            match = re.search(r"uses: ([\w.-]+/[\w./-]+)@([0-9a-f]{40})  # (v[\d.]+)$", line)
            assert match, f"not pinned to a commit with its version in a comment: {line.strip()}"
            assert PINNED[match.group(1)] == (match.group(2), match.group(3)), line.strip()


def test_build_workflow_triggers_and_dispatch_inputs():
    on = CALLER["on"]
    assert set(on) == {"push", "pull_request", "workflow_dispatch"}
    assert on["push"] == {"branches": ["main"], "tags": ["v*"]}
    inputs = on["workflow_dispatch"]["inputs"]
    assert set(inputs) == {"profile", "only", "dry-run", "publish"}
    assert inputs["profile"]["type"] == "choice" and inputs["profile"]["default"] == "full"
    assert set(inputs["profile"]["options"]) <= set(PROFILES) - {"local"}  # local means "this machine"
    assert inputs["only"] == {**inputs["only"], "type": "string", "default": ""}
    for flag in ("dry-run", "publish"):
        assert inputs[flag]["type"] == "boolean" and inputs[flag]["default"] is False, flag


@pytest.mark.parametrize(
    ("context", "profile"),
    [
        (run_context("same-repo-pr"), "pr"),
        (run_context("fork-pr"), "pr"),
        (run_context("push"), "full"),
        (run_context("push", ref="refs/tags/v1.2.0"), "full"),
        (run_context("dispatch"), "full"),
        (run_context("dispatch", profile="pr"), "pr"),
    ],
    ids=["pr", "fork-pr", "push", "tag", "dispatch", "dispatch-pr"],
)
def test_the_profile_is_pr_for_pull_requests_and_full_otherwise(context, profile):
    assert context["env"]["PROFILE"] == profile


def test_the_job_graph():
    assert {name: JOBS[name].get("needs") for name in JOBS} == {
        "plan": None,
        "images": "plan",
        "build": ["plan", "images"],
        "test-cpu": ["plan", "build"],
        "test-gpu": ["plan", "build"],
        "summary": ["build", "test-cpu", "test-gpu"],
        "publish": ["plan", "build", "test-cpu", "test-gpu"],
        # Wheels are attached only once the Hub release is done (publish needs every build and test).
        "release-wheels": ["plan", "publish"],
    }
    assert set(JOBS["plan"]["outputs"]) == {"jobs", "gpu_jobs", "wheels", "images"}
    for name, output in (("build", "jobs"), ("test-cpu", "jobs"), ("test-gpu", "gpu_jobs"), ("images", "images")):
        strategy = JOBS[name]["strategy"]
        assert strategy["matrix"] == f"${{{{ fromJSON(needs.plan.outputs.{output}) }}}}", name
        assert strategy["fail-fast"] is False, f"{name}: one failing cell must not cancel the others"
        if name != "images":
            assert JOBS[name]["name"] == f"{name} ${{{{ matrix.job }}}}"  # not every matrix value
    assert JOBS["images"]["name"] == "images ${{ matrix.kernel }} ${{ matrix.variant }}"
    assert JOBS["images"]["runs-on"] == BUILD_RUNS_ON
    assert JOBS["build"]["runs-on"] == JOBS["test-cpu"]["runs-on"] == BUILD_RUNS_ON  # GitHub-hosted for pull requests
    assert JOBS["test-gpu"]["runs-on"] == "${{ matrix.test_runner }}"
    assert JOBS["summary"]["if"] == "always()"


def test_every_job_is_one_command_a_developer_can_run():
    # Besides installing kernel-matrix (in test-gpu, into a venv of its own), each job runs kernel-matrix, a
    # script of the repository, or the one other tool its job names (summary: awk over the tables there are,
    # found with bash's nullglob).
    others = {"summary": "shopt", "release-wheels": "gh"}
    for name, job in JOBS.items():
        setup = [*install_steps(name), *registry_logins(name)]
        setup += [s for s in job["steps"] if s.get("run", "").startswith("python3 -m venv ")]
        commands = [s["run"] for s in job["steps"] if "run" in s and s not in setup]
        assert commands, name
        for command in commands:
            first = command.split()[0]
            assert first in ("kernel-matrix", others.get(name)) or (
                first.startswith("scripts/") and (REPO / first).is_file()
            ), f"{name}: {command}"

    def commands(job):
        return [s["run"] for s in JOBS[job]["steps"] if "run" in s]

    assert commands("test-cpu")[-1] == 'kernel-matrix test-variant --cpu-only --kernel "$KERNEL" "$VARIANTS"'
    assert commands("test-gpu")[-1] == 'kernel-matrix test-variant --kernel "$KERNEL" "$VARIANTS"'
    assert commands("release-wheels") == ['gh release create "$TAG" --verify-tag --generate-notes wheels/*.whl']
    for job in ("build", "test-cpu", "test-gpu"):
        for s in JOBS[job]["steps"]:
            if "$VARIANT" in s.get("run", ""):
                cell = {"KERNEL": "${{ matrix.kernel }}", "VARIANTS": "${{ matrix.variants }}"}
                if "--signed-by" in s["run"]:  # build's published variants: this repository's signed ones
                    cell["SIGNER"] = "${{ github.repository }}"
                    cell["SIGNER_ID"] = "${{ github.repository_id }}"
                    cell["DEFAULT_BRANCH"] = "${{ github.event.repository.default_branch || 'main' }}"
                    cell["BUILDER_IMAGES"] = BUILDER_IMAGES
                if "test-variant" in s["run"]:  # the cell's environment installs the same kernel-matrix
                    cell["KERNEL_MATRIX_INSTALL"] = "${{ inputs.kernel-matrix }}"
                assert s["env"] == cell, (job, s["run"])
    assert os.access(REPO / "scripts" / "test-variant", os.X_OK)
    assert not (REPO / "scripts" / "gpu-test").exists(), "renamed to scripts/test-variant"


# --- runners: only test-gpu reaches a self-hosted runner, and never for a fork ----------------------------------

# build and test-cpu: for a pull request, the hosted runner of the cell's arch, whatever its matrix says.
BUILD_RUNS_ON = (
    f"${{{{ {PULL_REQUEST_RUN} && (matrix.arch == 'aarch64' && 'ubuntu-24.04-arm' || 'ubuntu-24.04') "
    "|| matrix.build_runner }}"
)


# Where the build job reads the images job's list of builder images: only after that job passed.
BUILDER_IMAGES = "${{ needs.images.result == 'success' && format('{0}/builder-images', runner.temp) || '' }}"
REGISTRY_LOGIN = 'printf \'%s\' "$TOKEN" | docker login "$REGISTRY" --username "$ACTOR" --password-stdin'


def registry_logins(job: str) -> list[dict]:
    """The steps that log the job's engine in to the registry the builder images are shared through."""
    return [s for s in JOBS[job]["steps"] if s.get("run") == REGISTRY_LOGIN]


def install_steps(job: str) -> list[dict]:
    """The steps that install kernel-matrix: the `kernel-matrix` input, never the caller's checkout."""
    return [s for s in JOBS[job]["steps"] if s.get("env", {}).get("KERNEL_MATRIX") == "${{ inputs.kernel-matrix }}"]


# What the caller passes: kernel-matrix at the commit its `uses:` pins (init writes both), or `.` in
# kernel-matrix's own repository.
PINNED_INSTALL = "git+https://github.com/kernel-matrix/kernel-matrix@" + "0123456789abcdef" * 2 + "01234567"
REUSABLE_WORKFLOWS = ("reusable-build.yml", "reusable-upstream.yml")


def all_install_steps() -> list[tuple[str, str, dict]]:
    """Every step of the reusable workflows that installs kernel-matrix: (workflow, job, step)."""
    return [
        (reusable, name, s)
        for reusable in REUSABLE_WORKFLOWS
        for name, job in load(WORKFLOW_DIR / reusable)["jobs"].items()
        for s in job["steps"]
        if s.get("env", {}).get("KERNEL_MATRIX") == "${{ inputs.kernel-matrix }}"
    ]


def test_every_job_installs_kernel_matrix_from_the_pinned_commit_never_by_name():
    for reusable in REUSABLE_WORKFLOWS:
        declared = load(WORKFLOW_DIR / reusable)["on"]["workflow_call"]["inputs"]["kernel-matrix"]
        # No default: a name and version on an index (kernel-matrix==X) is anyone's to register and fill.
        assert declared["required"] is True and "default" not in declared, reusable
    for path in WORKFLOWS:
        assert not re.search(r"kernel-matrix\s*[=<>~!]=", path.read_text()), (
            f"{path.name} installs kernel-matrix by name"
        )
    for job in ("plan", "images", "build", "test-cpu", "test-gpu", "publish"):
        (install,) = install_steps(job)
        assert install["run"].rstrip().endswith('pip install --quiet "$KERNEL_MATRIX"'), job
    for job in ("summary", "release-wheels"):
        assert install_steps(job) == [], job  # they run no kernel-matrix
    # One install step, word for word, in every job of both reusable workflows (a composite action cannot be
    # pinned from a reusable workflow, which knows nothing of its own ref: actions/toolkit#1264).
    steps = all_install_steps()
    assert len(steps) == 8 and len({s["run"] for _, _, s in steps}) == 1, [(w, j) for w, j, _ in steps]
    # test-variant's cell environments install the same, checked by the same job's install step before it.
    for job in ("test-cpu", "test-gpu"):
        test = step(job, run="kernel-matrix test-variant")
        assert test["env"]["KERNEL_MATRIX_INSTALL"] == "${{ inputs.kernel-matrix }}"
        assert JOBS[job]["steps"].index(install_steps(job)[0]) < JOBS[job]["steps"].index(test), job
    # kernel-matrix's own caller installs the code under test.
    assert CALLER_JOB["with"]["kernel-matrix"] == "."


# A stand-in python: records `python -m pip ...` instead of installing.
RECORDING_PYTHON = '#!/bin/sh\nprintf "%s\\n" "$*" >>"$PIP_LOG"\n'


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        (PINNED_INSTALL, True),
        (".", True),  # kernel-matrix's own repository: the checkout is kernel-matrix
        ("kernel-matrix==0.1.0", False),  # the name is unclaimed on PyPI: whoever registers it runs in publish
        ("kernel-matrix", False),
        ("kernel_matrix @ git+https://github.com/kernel-matrix/kernel-matrix@" + "a" * 40, False),
        ("git+https://github.com/kernel-matrix/kernel-matrix@main", False),  # a branch moves
        ("git+https://github.com/kernel-matrix/kernel-matrix@v0.1.0", False),  # so can a tag
        ("git+https://github.com/kernel-matrix/kernel-matrix@" + "a" * 39, False),  # abbreviated
        ("git+https://github.com/kernel-matrix/kernel-matrix@" + "A" * 40, False),
        ("git+https://evil.example/kernel-matrix/kernel-matrix@" + "a" * 40, False),
        ("git+http://github.com/kernel-matrix/kernel-matrix@" + "a" * 40, False),
        ("git+https://github.com/kernel-matrix/kernel-matrix@" + "a" * 40 + " --index-url https://evil", False),
        ("git+https://github.com/kernel-matrix/kernel-matrix@" + "a" * 40 + "\n--index-url=https://evil", False),
        ("git+https://github.com/kernel-matrix/..@" + "a" * 40, False),
        ("./", False),
        ("-e .", False),
        ("", False),
    ],
)
def test_the_install_step_refuses_all_but_a_pinned_commit_before_pip_runs(tmp_path, value, accepted):
    """The step as written, run by bash with the job's environment: an accepted value reaches pip as one
    argument; anything else is refused in one line naming it, exit 2, and pip never runs."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text(RECORDING_PYTHON)
    (tmp_path / "bin" / "python").chmod(0o755)
    log = tmp_path / "pip.log"
    for workflow, job, s in all_install_steps():
        log.write_text("")
        context = run_context("push") | {"inputs": {"kernel-matrix": value}}
        env = {k: render(v, context) for k, v in s["env"].items()}
        env |= {"PIP_LOG": str(log), "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
        result = bash(s["run"], env, cwd=tmp_path)
        if accepted:
            assert result.returncode == 0 and result.stderr == "", (workflow, job, result.stderr)
            assert log.read_text() == f"-m pip install --quiet {value}\n", (workflow, job)
        else:
            assert result.returncode == 2, (workflow, job, result.stderr)
            assert log.read_text() == "", (workflow, job)  # pip never ran
            (line,) = result.stderr.splitlines()  # one line, whatever the value holds
            assert line.startswith("error: input kernel-matrix = ") and "git+https://github.com/OWNER/NAME@" in line


@pytest.fixture
def git_identity(monkeypatch):
    for name, value in (("GIT_AUTHOR_NAME", "a"), ("GIT_AUTHOR_EMAIL", "a@b"), ("GIT_COMMITTER_NAME", "a")):
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "a@b")


@pytest.mark.processes
def test_pip_installs_from_github_at_a_full_commit(tmp_path, git_identity):
    """What the install step hands pip, `git+https://github.com/OWNER/NAME@<40 hex>`, with github.com redirected
    to a local repository (git's url.<base>.insteadOf): the real pip and git fetch exactly that commit, whether a
    branch holds it, an older commit of one, or only a ref no branch shows (a pull request's, as GitHub has)."""

    def git(*argv, cwd):
        return subprocess.run(["git", *argv], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()

    work = tmp_path / "work"
    (work / "probe").mkdir(parents=True)
    (work / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "probe"\nversion = "1"\n[tool.setuptools]\npackages = ["probe"]\n'
    )
    commits = {}
    git("init", "-q", "-b", "main", cwd=work)
    for label in ("older", "head"):
        (work / "probe" / "__init__.py").write_text(f"LABEL = {label!r}\n")
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", label, cwd=work)
        commits[label] = git("rev-parse", "HEAD", cwd=work)
    (work / "probe" / "__init__.py").write_text("LABEL = 'pull'\n")
    git("commit", "-q", "-am", "pull", cwd=work)
    commits["pull"] = git("rev-parse", "HEAD", cwd=work)
    git("reset", "-q", "--hard", commits["head"], cwd=work)
    bare = tmp_path / "owner" / "probe.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    git("update-ref", "refs/pull/7/head", commits["pull"], cwd=bare)
    git("config", "uploadpack.allowReachableSHA1InWant", "true", cwd=bare)  # as GitHub serves
    config = tmp_path / "gitconfig"
    config.write_text(f'[url "file://{bare}"]\n\tinsteadOf = https://github.com/owner/probe\n')
    env = {**os.environ, "GIT_CONFIG_GLOBAL": str(config), "GIT_CONFIG_NOSYSTEM": "1"}
    # (The branch's head, the common case, is what tests/end_to_end/test_first_run.py installs.)
    for label, commit in ((label, commits[label]) for label in ("older", "pull")):
        target = tmp_path / f"site-{label}"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--target",
                str(target),
                f"git+https://github.com/owner/probe@{commit}",
            ],
            env=env,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, (label, result.stderr)
        assert (target / "probe" / "__init__.py").read_text() == f"LABEL = {label!r}\n", label
        (record,) = target.glob("probe-1.dist-info/direct_url.json")
        assert json.loads(record.read_text())["vcs_info"]["commit_id"] == commit, label


def test_the_caller_passes_its_run_to_the_reusable_workflow():
    declared = BUILD["on"]["workflow_call"]
    assert set(CALLER_JOB["with"]) <= set(declared["inputs"]) and set(CALLER_JOB["secrets"]) == set(declared["secrets"])
    assert CALLER_JOB["uses"] == REUSABLE
    for kind, inputs in (("push", {}), ("dispatch", {"publish": True, "dry_run": True, "only": "torch=2.13"})):
        called = run_context(kind, **inputs)["inputs"]
        assert called["publish"] is inputs.get("publish", False) and called["dry-run"] is inputs.get("dry_run", False)
        assert called["only"] == inputs.get("only", "") and called["matrix-file"] == "build_matrix.yaml"
    # A pull request's caller may ask for any profile: the reusable workflow builds pr.
    context = run_context("fork-pr")
    context["inputs"]["profile"] = "full"
    assert render(BUILD["env"]["PROFILE"], context) == "pr"


def cache_steps() -> tuple[dict, dict]:
    (restore,) = [s for s in JOBS["build"]["steps"] if s.get("uses", "").startswith("actions/cache/restore@")]
    (save,) = [s for s in JOBS["build"]["steps"] if s.get("uses", "").startswith("actions/cache/save@")]
    return restore, save


def test_the_object_cache_is_restored_per_kernel_and_cell_and_never_for_publish():
    restore, save = cache_steps()
    build = step("build", run="kernel-matrix build")
    steps = JOBS["build"]["steps"]
    assert steps.index(restore) < steps.index(build) < steps.index(save)
    # objects only: variants, records and logs are this run's
    assert restore["with"]["path"] == save["with"]["path"] == "build/.cache/objects"
    prefix = "kernel-matrix-objects-${{ matrix.job }}-"  # <kernel>-<variant>, or the batch's
    assert restore["with"]["restore-keys"] == prefix
    key = restore["with"]["key"]
    assert key.startswith(prefix) and "hashFiles(" in key and "'**/*.cu'" in key and "'**/build.toml'" in key
    # Saved under the key the restore computed from the sources, before the build wrote anything.
    assert save["with"]["key"] == f"${{{{ steps.{restore['id']}.outputs.cache-primary-key }}}}"
    for job in ("plan", "test-cpu", "test-gpu", "publish", "release-wheels"):
        assert not any("actions/cache" in s.get("uses", "") for s in JOBS[job]["steps"]), job


# Each kind of run, and whether its build job reads and writes the cross-run object cache: a release build (a
# tag, or a run asked to publish) does neither, so no object a run on the default branch left is released.
CACHE_RUNS = {
    "push to main": (run_context("push"), True),
    "push to a branch": (run_context("push", ref="refs/heads/feature"), True),
    "same-repo-pr": (run_context("same-repo-pr"), True),
    "fork-pr": (run_context("fork-pr"), True),  # its own scope, which no other branch reads
    "dispatch": (run_context("dispatch"), True),
    "dispatch, dry-run": (run_context("dispatch", dry_run=True), True),
    "tag": (run_context("push", ref="refs/tags/v1.2.0"), False),
    "dispatch on a tag": (run_context("dispatch", ref="refs/tags/v1.2.0"), False),
    "dispatch, publish on main": (run_context("dispatch", publish=True), False),
    "dispatch, publish on a feature branch": (run_context("dispatch", ref="refs/heads/feature", publish=True), False),
}


@pytest.mark.parametrize("kind", CACHE_RUNS)
def test_release_builds_neither_restore_nor_save_the_object_cache(kind):
    context, cached = CACHE_RUNS[kind]
    restore, save = cache_steps()
    context = context | {"matrix": {"job": "k-v"}}
    assert runs(restore, context) is cached
    miss = context | {"steps": {restore["id"]: {"outputs": {"cache-hit": "false"}}}}
    assert runs(save, miss) is cached
    # Not saved again over an exact hit; never after a failed build.
    hit = context | {"steps": {restore["id"]: {"outputs": {"cache-hit": "true"}}}}
    assert runs(save, hit) is False and runs(save, miss | {"status": "failure"}) is False


def test_only_the_gpu_test_job_runs_on_self_hosted_runners():
    cells = cli_matrix("full")["include"]
    assert not any("self-hosted" in cell["build_runner"] for cell in cells), "builds run on GitHub's runners"
    for cell in cells:
        assert ("self-hosted" in cell["test_runner"]) == cell["gpu_test"] == (cell["backend"] == "cuda"), cell
        if cell["gpu_test"]:
            assert cell["arch"] in ("x86_64", "aarch64") and "gpu" in cell["test_runner"]
    for path in WORKFLOWS:
        for name, job in load(path)["jobs"].items():
            if "uses" in job:  # a caller: its jobs are the reusable workflow's, checked here too
                continue
            runs_on = job["runs-on"]
            if (path.name, name) == ("reusable-build.yml", "test-gpu"):
                continue
            assert runs_on == BUILD_RUNS_ON or re.fullmatch(r"ubuntu-[\d.]+(-arm)?", runs_on), name


# A pull request's own build_matrix.yaml asking for the GPU host (the attack of issue 12).
HOSTILE_CELLS = [
    {"arch": "x86_64", "build_runner": ["self-hosted", "linux", "x64", "gpu"]},
    {"arch": "aarch64", "build_runner": ["self-hosted", "linux", "arm64", "gpu"]},
    {"arch": "riscv64", "build_runner": ["gpu"]},
    {"build_runner": ["ubuntu-24.04", "gpu"]},
]


@pytest.mark.parametrize("kind", ["fork-pr", "same-repo-pr", "deleted-fork-pr"])
@pytest.mark.parametrize("job", ["build", "test-cpu"])
def test_a_pull_requests_matrix_never_chooses_the_runner(kind, job):
    for cell in HOSTILE_CELLS:
        context = run_context(kind) | {"matrix": cell}
        expected = "ubuntu-24.04-arm" if cell.get("arch") == "aarch64" else "ubuntu-24.04"
        assert render(JOBS[job]["runs-on"], context) == expected, cell


def test_the_pull_request_runners_are_the_matrix_files_own():
    # The workflow's fixed labels for pull requests are what build_matrix.yaml names for other runs.
    archs = load_matrix(REPO / "build_matrix.yaml").spec.archs
    for arch, hosted in (("x86_64", "ubuntu-24.04"), ("aarch64", "ubuntu-24.04-arm")):
        assert archs[arch].build_runner == [hosted]
        assert render(BUILD_RUNS_ON, run_context("fork-pr") | {"matrix": {"arch": arch}}) == hosted


@pytest.mark.parametrize("kind", ["push", "dispatch"])
def test_pushes_and_dispatches_build_where_the_matrix_says(kind):
    cell = {"arch": "x86_64", "build_runner": ["self-hosted", "linux", "x64", "big"]}
    assert render(JOBS["build"]["runs-on"], run_context(kind) | {"matrix": cell}) == cell["build_runner"]


# A run of each kind, and whether the GPU tests may run in it.
GPU_RUNS = {
    "fork-pr": (run_context("fork-pr"), False),
    "fork-pr, head repository deleted": (run_context("deleted-fork-pr"), False),
    "same-repo-pr": (run_context("same-repo-pr"), True),
    "push to main": (run_context("push"), True),
    "tag": (run_context("push", ref="refs/tags/v1.2.0"), True),
    "dispatch": (run_context("dispatch", ref="refs/heads/feature"), True),
    "same-repo-pr, a build failed": (run_context("same-repo-pr", results={"build": "failure"}), True),
    "same-repo-pr, cancelled": (run_context("same-repo-pr", status="cancelled"), False),
}


@pytest.mark.parametrize("kind", GPU_RUNS)
def test_gpu_tests_never_run_for_forks(kind):
    context, expected = GPU_RUNS[kind]
    assert runs(JOBS["test-gpu"], context) is expected


@pytest.mark.parametrize("kind", GPU_RUNS)
def test_cpu_tests_run_for_every_run_forks_included(kind):
    # GitHub-hosted runners only: every kind of run tests every cell, unless it was cancelled.
    context, _ = GPU_RUNS[kind]
    assert runs(JOBS["test-cpu"], context) is (context["status"] != "cancelled")


def test_the_gpu_jobs_condition_names_the_fork_rule_word_for_word():
    # docs/runner-host.md and docs/workflows.md quote it; the table above checks what it means.
    assert FORK_CLAUSE in " ".join(JOBS["test-gpu"]["if"].split())
    for page in ("runner-host.md", "workflows.md"):
        assert f"`{FORK_CLAUSE}`" in (REPO / "docs" / page).read_text().replace("\n  ", " "), page


def test_the_workflows_page_names_every_workflow_job_and_input():
    page = (REPO / "docs" / "workflows.md").read_text()
    names = [p.name for p in WORKFLOWS] + list(JOBS) + list(CALLER["on"]["workflow_dispatch"]["inputs"])
    names += list(BUILD["on"]["workflow_call"]["inputs"]) + ["HF_TOKEN"]
    assert [name for name in names if f"`{name}`" not in page] == []
    # Its local commands are the jobs' commands.
    for command in (
        "kernel-matrix test-variant --cpu-only --kernel",
        "kernel-matrix wheels --kernel",
        "gh release create",
    ):
        assert command in page, command


def test_the_workflows_pages_local_recipe_names_a_cell_of_the_pr_profile():
    """Its `V=` is "one of" `matrix --profile pr`'s cells: its publish --dry-run --allow-partial
    releases what was built, which must be a variant of that profile."""
    from kernel_matrix.planning.selection import Selection

    page = (REPO / "docs" / "workflows.md").read_text()
    (kernel, variant) = re.search(r"^K=(\S+) V=(\S+)", page, flags=re.M).groups()
    cells = Selection(REPO / "build_matrix.yaml", profile="pr").resolve().cells
    assert (kernel, variant) in {(cell.kernel, cell.variant.name) for cell in cells}


def test_gpu_tests_are_skipped_without_cuda_cells():
    context = run_context("push")
    context["needs"]["plan"]["outputs"]["gpu_jobs"] = ""
    assert runs(JOBS["test-gpu"], context) is False


def test_the_condition_evaluator_reads_github_semantics():
    # The tests above are only as good as the evaluator: pin the rules they rely on.
    context = run_context("push")
    assert Expression("'Owner/Kernel' == github.repository").evaluate(context) is True  # case-insensitive
    assert Expression("github.event.pull_request.head.repo.full_name").evaluate(context) is None
    assert Expression("inputs.publish || 'x'").evaluate(context) == "x"
    assert Expression("github.ref == 'refs/heads/main' && 'yes' || 'no'").evaluate(context) == "yes"
    assert Expression("!cancelled() && 1 == 1").evaluate(context) is True
    assert Expression("format('refs/heads/{0}', 'main')").evaluate(context) == "refs/heads/main"
    assert Expression("null == ''").evaluate(context) is True  # both are 0 as numbers
    # A job whose need was skipped is skipped, unless its condition names a status function.
    skipped = run_context("push", results={"test-gpu": "skipped"})
    assert runs({"needs": ["test-gpu"]}, skipped) is False
    assert runs({"needs": ["test-gpu"], "if": "github.event_name == 'push'"}, skipped) is False
    assert runs({"needs": ["test-gpu"], "if": "!cancelled() && needs.test-gpu.result == 'skipped'"}, skipped) is True
    assert runs({"needs": "plan", "if": "needs.build.result == 'success'"}, skipped) is False  # not a need: null


# --- the plan job: what its commands write is what the matrix jobs read -----------------------------------------


def plan_job(context: dict, tmp_path: Path) -> dict:
    """Run the plan job's kernel-matrix steps as GitHub does; return its outputs as needs.plan.outputs."""
    output = tmp_path / "github_output"
    output.write_text("")
    runner = github_environment(context, tmp_path)
    steps = {}
    for s in JOBS["plan"]["steps"]:
        if not s.get("run", "").startswith("kernel-matrix"):
            continue
        env = {**context["env"], **{k: render(v, context) for k, v in s.get("env", {}).items()}}
        result = bash(s["run"], {**env, **runner, "GITHUB_OUTPUT": str(output)})
        assert result.returncode == 0, f"{s['id']}: {result.stderr}"
        steps[s["id"]] = {"outputs": {}}
        for line in output.read_text().splitlines():
            name, _, value = line.partition("=")
            steps[s["id"]]["outputs"][name] = value
        output.write_text("")
    return {name: text(render(value, {"steps": steps})) for name, value in JOBS["plan"]["outputs"].items()}


def github_environment(context: dict, tmp_path: Path) -> dict[str, str]:
    """What the runner tells every step about the run: the event's name and payload, and the repository."""
    payload = tmp_path / "event.json"
    payload.write_text(json.dumps(context["github"]["event"]))
    github = context["github"]
    return {
        "GITHUB_EVENT_NAME": github["event_name"],
        "GITHUB_EVENT_PATH": str(payload),
        "GITHUB_REPOSITORY": github["repository"],
    }


PLAN_RUNS = {
    "pr": (run_context("same-repo-pr"), "pr", None),
    "fork-pr": (run_context("fork-pr"), "pr", None),
    "push": (run_context("push"), "full", None),
    "tag": (run_context("push", ref="refs/tags/v1.2.0"), "full", None),
    "tag v1, the release's branch": (run_context("push", ref="refs/tags/v1"), "full", None),
    "dispatch only=torch=2.13": (run_context("dispatch", only="torch=2.13"), "full", "torch=2.13"),
    "dispatch pr only=arch=x86_64": (run_context("dispatch", profile="pr", only="arch=x86_64"), "pr", "arch=x86_64"),
    "dispatch only=backend=cpu": (run_context("dispatch", only="backend=cpu"), "full", "backend=cpu"),
}


def gpu_jobs_of(jobs: dict, cells: list[dict]) -> list[dict]:
    """The jobs' entries narrowed to the cells the GPU runners test (`gpu_test`), and those left with one."""
    tested = {(c["kernel"], c["variant"]) for c in cells if c["gpu_test"]}
    narrowed = [
        job | {"variants": ",".join(v for v in job["variants"].split(",") if (job["kernel"], v) in tested)}
        for job in jobs["include"]
    ]
    return [job for job in narrowed if job["variants"]]


@pytest.mark.parametrize("kind", PLAN_RUNS)
@pytest.mark.processes  # Python started by bash (run: lines)
def test_the_plan_steps_write_the_matrices_the_jobs_read(kind, tmp_path):
    context, profile, only = PLAN_RUNS[kind]
    outputs = plan_job(context, tmp_path)
    jobs = json.loads(outputs["jobs"])  # what fromJSON parses
    assert jobs == cli_jobs(profile, only)
    cells = cli_matrix(profile, only)["include"]
    # Below GitHub's limit, a job a cell, in the cells' order.
    assert [(j["kernel"], j["variants"]) for j in jobs["include"]] == [(c["kernel"], c["variant"]) for c in cells]
    gpu = gpu_jobs_of(jobs, cells)
    context["needs"] = {"plan": {"outputs": outputs}}
    assert runs(JOBS["test-cpu"], context)  # every cell, with or without a CUDA one
    if kind == "fork-pr":  # never a GPU runner for a fork's code: twice refused, by the plan and by the job's `if`
        assert gpu and outputs["gpu_jobs"] == ""
        assert not runs(JOBS["test-gpu"], context)
        context["needs"]["plan"]["outputs"]["gpu_jobs"] = json.dumps({"include": gpu})
        assert not runs(JOBS["test-gpu"], context)
    elif gpu:
        assert json.loads(outputs["gpu_jobs"]) == {"include": gpu}
        assert runs(JOBS["test-gpu"], context)
    else:  # no CUDA cell selected: no GPU job, rather than a matrix GitHub would refuse
        assert outputs["gpu_jobs"] == ""
        assert not runs(JOBS["test-gpu"], context)


@pytest.mark.parametrize(
    ("ref", "refusal"),
    [
        ("refs/tags/v2", "--tag v2: v<N> is the name of version N's branch"),
        ("refs/tags/v0", "--tag v0: v<N> is the name of version N's branch"),
        ("refs/tags/v1.0..1", "--tag 'v1.0..1': not a valid tag name"),
    ],
)
@pytest.mark.processes  # Python started by bash (run: lines)
def test_the_plan_refuses_a_tag_publish_would_refuse(tmp_path, ref, refusal):
    """img2gray is version 1: a v2 tag would hold the name of version 2's branch on the Hub. publish refuses it,
    but only after the whole matrix (and the release's approval): the plan job refuses it first, with publish's
    own check, in one line, and outputs no job."""
    context = run_context("push", ref=ref)
    (plan,) = [s for s in JOBS["plan"]["steps"] if s.get("id") == "plan"]
    output = tmp_path / "github_output"
    env = {**context["env"], **{k: render(v, context) for k, v in plan["env"].items()}}
    result = bash(plan["run"], {**env, **github_environment(context, tmp_path), "GITHUB_OUTPUT": str(output)})
    assert result.returncode == 2 and result.stdout == "", result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {refusal}"), line
    assert not output.exists() or output.read_text() == ""
    # The same check as publish's, not a copy of it.
    from kernel_matrix.errors import ConfigError
    from kernel_matrix.releasing.publish import check_tag, check_tag_beside_branch

    with pytest.raises(ConfigError, match=re.escape(refusal.split(": ", 1)[1])):
        check_tag_beside_branch(check_tag(ref.removeprefix("refs/tags/")), "v1")


@pytest.mark.processes
def test_the_plan_command_writes_the_matrix_the_build_job_reads(tmp_path):
    output = tmp_path / "github_output"
    output.write_text("earlier=1\n")
    result = kernel_matrix(
        "matrix",
        "--json",
        "--profile",
        "pr",
        "--github-output",
        env={**os.environ, "GITHUB_OUTPUT": str(output)},
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == cli_matrix("pr")  # stdout: every cell's entry
    lines = output.read_text().splitlines()
    assert lines[0] == "earlier=1" and len(lines) == 5 and lines[1].startswith("jobs=")
    assert lines[2].startswith("gpu_jobs={") and lines[4] == "wheels=true"  # img2gray: a torch extension
    # A builder image each cell's recipe (one kernel: a cell each), for the images job's matrix.
    images = json.loads(lines[3].removeprefix("images="))["include"]
    assert [entry["variant"] for entry in images] == [cell["variant"] for cell in cli_matrix("pr")["include"]]
    assert all(set(entry) == {"kernel", "variant", "arch", "build_runner"} for entry in images)
    jobs = json.loads(lines[1].removeprefix("jobs="))  # what fromJSON parses
    assert jobs == cli_jobs("pr")
    keys = {"kernel", "variants", "job", "arch", "build_runner", "test_runner", "noarch", "wheel", "cpu_test", "paths"}
    keys |= {"logs"}
    keys |= {"build_minutes", "test_minutes"}
    assert all(set(job) == keys for job in jobs["include"])
    # A job a cell: the limits the jobs always had.
    assert {(job["build_minutes"], job["test_minutes"]) for job in jobs["include"]} == {(90, 60)}
    for name, minutes in (("build", "build_minutes"), ("test-cpu", "test_minutes"), ("test-gpu", "test_minutes")):
        assert JOBS[name]["timeout-minutes"] == f"${{{{ matrix.{minutes} }}}}", name


# --- artifacts: a variant travels from its build job to the tests and to publish as build/<variant>/, its wheel to
# release-wheels as wheels/<wheel> ---------------------------------------------------------------------------------


def upload(spec: dict, context: dict, workspace: Path) -> tuple[str, dict[str, bytes]]:
    """actions/upload-artifact's layout: entries are relative to the search path of a lone path (what comes before
    its first wildcard; a file's folder), or to the common ancestor of several paths' search paths."""
    patterns = [p.strip() for p in render(spec["with"]["path"], context).splitlines() if p.strip()]

    def search_path(pattern: str) -> Path:
        return Path(*itertools.takewhile(lambda part: not set(part) & set("*?["), Path(pattern).parts))

    roots = [search_path(p) for p in patterns]
    if len(roots) > 1:
        root = Path(os.path.commonpath(roots))
    else:
        root = roots[0] if (workspace / roots[0]).is_dir() else roots[0].parent
    entries = {}
    for pattern in patterns:
        for found in sorted(workspace.glob(pattern.rstrip("/"))):
            for file in [found] if found.is_file() else sorted(found.rglob("*")):
                if file.is_file():
                    entries[file.relative_to(workspace / root).as_posix()] = file.read_bytes()
    if not entries and spec["with"].get("if-no-files-found") == "error":
        raise AssertionError(f"upload-artifact fails: nothing matches {spec['with']['path']!r}")
    return render(spec["with"]["name"], context), entries


def download(spec: dict, context: dict, artifacts: dict[str, dict[str, bytes]], workspace: Path) -> list[str]:
    """actions/download-artifact: one by name into path; by pattern into path/<name>/, or merged into path.
    Returns the files that one artifact wrote over another's."""
    options = {k: render(v, context) for k, v in spec["with"].items()}
    merged = options.get("merge-multiple") is True
    if "name" in options:
        chosen = [("", artifacts[options["name"]])]
    else:
        chosen = [("" if merged else n, a) for n, a in artifacts.items() if fnmatch.fnmatch(n, options["pattern"])]
    overwritten = []
    for folder, entries in chosen:
        for name, data in entries.items():
            target = workspace / options["path"] / folder / name
            if target.exists():
                overwritten.append(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
    return overwritten


def build_upload(name_prefix: str) -> dict:
    """The build job's upload step whose artifact name starts with name_prefix."""
    (found,) = [
        s
        for s in JOBS["build"]["steps"]
        if s.get("uses", "").startswith("actions/upload-artifact@") and s["with"]["name"].startswith(name_prefix)
    ]
    return found


def wheel_name(cell: dict) -> str:
    """The wheel `kernel-matrix wheels --variant` writes for a cell: the command's contract (name-version+label)."""
    label = f"torch{cell['torch'].replace('.', '')}" + (f"cu{cell['cuda'].replace('.', '')}" if cell["cuda"] else "cpu")
    return f"{cell['kernel']}-1+{label}-cp39-abi3-manylinux_2_28_{cell['arch']}.whl"


def several_kernels(tmp_path: Path) -> Path:
    """A matrix of four kernels: img2gray, a copy under another name, a Python-only one and a [tvm-ffi] one."""
    import shutil

    from conftest import img2gray_as, tvm_ffi_kernel

    # Inside the matrix file's folder, where a matrix's kernels must be; the copy with a Hub repo of its own.
    shutil.copytree(REPO / "kernel", tmp_path / "img2gray", ignore=shutil.ignore_patterns("benchmarks", "tests"))
    img2gray_as(tmp_path, "gray-copy")
    package = tmp_path / "pure" / "torch-ext" / "pure"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (tmp_path / "pure" / "build.toml").write_text(
        '[general]\nname = "pure"\nversion = 1\nlicense = "MIT"\nbackends = ["cpu", "cuda", "xpu"]\n\n[torch-noarch]\n'
    )
    tvm_ffi_kernel(tmp_path)
    text = re.sub(r"^kernel: .*$", "kernels: [img2gray, gray-copy, pure, gray-tvm-ffi]", matrix_text(), flags=re.M)
    (tmp_path / "build_matrix.yaml").write_text(text)
    return tmp_path / "build_matrix.yaml"


# kernel-matrix as far as the build job uses it: what `build` and `wheels --kernel K --variant A,B,...` leave in
# the workspace. CELLS: each variant's folder under build/ and wheel name, as the real one writes them; LOGS: the
# kernel's log folder; FAIL: a variant whose build fails (the others of its batch are still built).
BUILD_STUB = r"""#!PYTHON
import json, os, pathlib, sys
signer = ["--signed-by", os.environ.get("SIGNER", ""), "--signer-repository-id", os.environ.get("SIGNER_ID", "")]
refs = ["--signer-ref", "refs/tags/v*", "--signer-ref", "refs/heads/" + os.environ.get("DEFAULT_BRANCH", "")]
reuse = ["--reuse-published", *signer, *refs] if sys.argv[1] == "build" else []
if sys.argv[1] not in ("build", "wheels") or sys.argv[6:] != reuse:
    sys.exit(64)
if reuse and ("" in signer or reuse[-1] == "refs/heads/"):  # no signer, or no default branch
    sys.exit(64)
if sys.argv[2:6:2] != ["--kernel", "--variant"]:
    sys.exit(64)
command, kernel, variants = sys.argv[1], sys.argv[3], sys.argv[5].split(",")
cells, build = json.loads(os.environ["CELLS"]), pathlib.Path("build")
logs = build / os.environ["LOGS"]
logs.mkdir(parents=True, exist_ok=True)
rows, failed = [], False
for variant in variants:
    folder = build / cells[variant]["path"]
    if command == "wheels":
        if not (folder / "metadata.json").is_file():
            sys.exit(3)
        (build / "wheels").mkdir(exist_ok=True)
        (build / "wheels" / cells[variant]["wheel"]).write_text(f"{kernel}/{variant}")
        (logs / f"{variant}.wheel.log").write_text("log")
    elif variant == os.environ.get("FAIL"):
        failed = True
        rows.append(f"| {variant} | FAILED |")
        (logs / f"{variant}.log").write_text("error")
    else:
        folder.mkdir(parents=True)
        (folder / "metadata.json").write_text(f"{kernel}/{variant}")
        rows.append(f"| {variant} | built |")
        (logs / f"{variant}.log").write_text("log")
if command == "build":
    (build / "summary.md").write_text("| variant | status |\n|---|---|\n" + "".join(f"{r}\n" for r in rows))
sys.exit(1 if failed else 0)
""".replace("PYTHON", sys.executable, 1)


def build_job(
    job: dict, cells: list[dict], workspace: Path, stub_dir: Path, fail: str | None = None
) -> tuple[dict[str, dict[str, bytes]], str]:
    """Run the build job's steps for one job entry, in order, as GitHub does (a failed step fails the job; later
    steps run as their `if` says), with a stand-in kernel-matrix; return what it uploads and the job's status."""
    stub = stub_dir / "kernel-matrix"
    if not stub.exists():
        stub_dir.mkdir(parents=True)
        stub.write_text(BUILD_STUB)
        stub.chmod(0o755)
    workspace.mkdir(parents=True)
    mine = {c["variant"]: {"path": c["path"], "wheel": wheel_name(c)} for c in cells if c["kernel"] == job["kernel"]}
    context, artifacts, status = (
        {"matrix": job, "github": {"repository": "owner/kernel", "repository_id": "700100"}},
        {},
        "success",
    )
    for s in JOBS["build"]["steps"]:
        if not runs(s, context | {"status": status}):
            continue
        if s.get("uses", "").startswith("actions/upload-artifact@"):
            name, entries = upload(s, context, workspace)
            assert name not in artifacts
            artifacts[name] = entries
        elif s.get("run", "").startswith("kernel-matrix"):
            env = {k: render(v, context) for k, v in s.get("env", {}).items()}
            env |= {"CELLS": json.dumps(mine), "LOGS": job["logs"], "FAIL": fail or ""}
            env["PATH"] = f"{stub_dir}{os.pathsep}{os.environ['PATH']}"
            result = bash(s["run"], env, cwd=workspace)
            assert result.returncode in (0, 1) and not result.stderr, f"{s['run']}: {result.stderr}"  # 1: a cell failed
            status = "success" if result.returncode == 0 and status == "success" else "failure"
    return artifacts, status


def batched(tmp_path: Path) -> Path:
    """A matrix of more cells than GitHub runs jobs of one matrix: img2gray on 26 torch releases x CPU + 4 CUDA
    versions x 2 archs, 260 cells."""
    releases = "\n".join(f'  "2.{m}": {{ pypi: "13.0", cuda: ["12.6", "12.8", "13.0", "13.2"] }}' for m in range(26))
    torch = "\n".join(f'  "2.{m}": all' for m in range(26))
    import shutil

    path = tmp_path / "build_matrix.yaml"
    shutil.copytree(REPO / "kernel", tmp_path / "kernel", ignore=shutil.ignore_patterns("benchmarks", "tests"))
    runners = "{build-runner: [ubuntu-24.04], gpu-test-runner: [self-hosted, linux, x64, gpu]}"
    path.write_text(
        f"kernel: kernel\ntorch:\n{torch}\narchs:\n  x86_64: {runners}\n  aarch64: {runners}\n"
        f"torch-releases:\n{releases}\n"
    )
    return path


@pytest.mark.parametrize("kernels", ["one", "several", "batched"])
@pytest.mark.processes
def test_each_job_downloads_what_it_reads(tmp_path, kernels):
    file = {"one": lambda: None, "several": lambda: several_kernels(tmp_path / "project")}.get(
        kernels, lambda: batched(tmp_path / "project")
    )()
    profile = "full" if kernels == "batched" else "pr"
    cells, jobs = cli_matrix(profile, file=file)["include"], cli_jobs(profile, file=file)["include"]
    assert len({c["kernel"] for c in cells}) == (4 if kernels == "several" else 1)
    # A job a cell, or (over 256 cells) batches of two, every cell in one job.
    assert len(jobs) == (len(cells) // 2 if kernels == "batched" else len(cells)) <= 256
    assert sorted((j["kernel"], v) for j in jobs for v in j["variants"].split(",")) == sorted(
        (c["kernel"], c["variant"]) for c in cells
    )
    by_name = {(c["kernel"], c["variant"]): c for c in cells}
    artifacts = {}
    for job in jobs:
        made, status = build_job(job, cells, tmp_path / "build-job" / job["job"], tmp_path / "stub")
        assert status == "success"
        mine = [by_name[job["kernel"], v] for v in job["variants"].split(",")]
        assert set(made) == {f"variant-{job['job']}", f"logs-{job['job']}"} | (
            {f"wheel-{job['job']}"} if job["wheel"] else set()  # a Python-only or tvm-ffi variant gets none
        )
        assert job["wheel"] == all(not c["noarch"] and not c["variant"].startswith("tvm-ffi") for c in mine)
        assert set(made[f"variant-{job['job']}"]) == {f"{c['path']}/metadata.json" for c in mine} | {"summary.md"}
        if job["wheel"]:
            assert set(made[f"wheel-{job['job']}"]) == {wheel_name(c) for c in mine}  # the .whl files, at the root
            assert {f"{job['logs']}/{c['variant']}.wheel.log" for c in mine} <= set(made[f"logs-{job['job']}"])
        artifacts |= made
    # A test job: its own job's variants at build/<path>/, nothing else (test-cpu: any job, test-gpu: CUDA cells).
    gpu = gpu_jobs_of({"include": jobs}, cells)
    for name, job in (("test-cpu", jobs[-1]), ("test-gpu", gpu[0])):
        workspace = tmp_path / name
        download(step(name, "actions/download-artifact"), {"matrix": job}, artifacts, workspace)
        built = next(j for j in jobs if j["job"] == job["job"])  # the artifact holds the whole batch
        mine = [by_name[job["kernel"], v] for v in built["variants"].split(",")]
        assert {p.relative_to(workspace).as_posix() for p in workspace.rglob("*") if p.is_file()} == {
            f"build/{c['path']}/metadata.json" for c in mine
        } | {"build/summary.md"}, name
        for cell in mine:
            assert (
                workspace / "build" / cell["path"] / "metadata.json"
            ).read_text() == f"{cell['kernel']}/{cell['variant']}"
    # The publish job: every variant at build/<path>/; no build logs, no wheels among them.
    workspace = tmp_path / "publish-job"
    overwritten = download(step("publish", "actions/download-artifact"), {}, artifacts, workspace)
    assert set(overwritten) == {"summary.md"}  # each variant's artifact has one; publish does not read it
    for cell in cells:
        assert (
            workspace / "build" / cell["path"] / "metadata.json"
        ).read_text() == f"{cell['kernel']}/{cell['variant']}"
    tops = {c["path"].split("/")[0] for c in cells}
    assert {p.name for p in (workspace / "build").iterdir()} == tops | {"summary.md"}
    # release-wheels: every compiled cell's wheel in wheels/, none overwritten by another, and nothing else.
    workspace = tmp_path / "release-job"
    assert download(step("release-wheels", "actions/download-artifact"), {}, artifacts, workspace) == []
    wheels = {p.name: p.read_text() for p in (workspace / "wheels").iterdir()}
    torch_extensions = [c for c in cells if not c["noarch"] and not c["variant"].startswith("tvm-ffi")]
    assert wheels == {wheel_name(c): f"{c['kernel']}/{c['variant']}" for c in torch_extensions}
    assert [p.name for p in workspace.iterdir()] == ["wheels"]


def test_a_failed_cell_of_a_batch_fails_its_job_and_leaves_the_others_to_test(tmp_path):
    file = batched(tmp_path / "project")
    cells, jobs = cli_matrix("full", file=file)["include"], cli_jobs("full", file=file)["include"]
    job = jobs[0]
    first, second = job["variants"].split(",")
    made, status = build_job(job, cells, tmp_path / "build-job", tmp_path / "stub", fail=first)
    assert status == "failure"
    path = {c["variant"]: c["path"] for c in cells}
    # The other cell's variant is uploaded (its tests run); no wheels for a failed job; both cells' logs and rows.
    assert set(made[f"variant-{job['job']}"]) == {f"{path[second]}/metadata.json", "summary.md"}
    assert f"wheel-{job['job']}" not in made
    logs = made[f"logs-{job['job']}"]
    assert {f"{job['logs']}/{first}.log", f"{job['logs']}/{second}.log"} <= set(logs)
    assert f"| {first} | FAILED |" in logs["summary.md"].decode()


def test_only_runners_backends_are_tested():
    """test-cpu skips (as a step) a noarch variant of a backend no runner has; test-gpu takes CUDA cells only."""
    test = step("test-cpu", run="kernel-matrix test-variant")
    context = {"matrix": {"cpu_test": False}, "status": "success"}
    assert not runs(test, context) and runs(test, context | {"matrix": {"cpu_test": True}})


def test_the_build_job_uploads_its_wheel_after_the_variant_and_fails_without_one(tmp_path):
    steps = JOBS["build"]["steps"]
    order = [s.get("run") or s["with"]["name"] for s in steps if "run" in s or "upload-artifact@" in s.get("uses", "")]
    assert order[-5:] == [
        'kernel-matrix build --kernel "$KERNEL" --variant "$VARIANTS" --reuse-published --signed-by "$SIGNER" '
        '--signer-repository-id "$SIGNER_ID" '
        "--signer-ref 'refs/tags/v*' --signer-ref \"refs/heads/$DEFAULT_BRANCH\" "
        '${BUILDER_IMAGES:+--builder-images "$BUILDER_IMAGES"}',
        "variant-${{ matrix.job }}",  # a packaging failure still leaves the variants to test
        'kernel-matrix wheels --kernel "$KERNEL" --variant "$VARIANTS"',
        "wheel-${{ matrix.job }}",
        "logs-${{ matrix.job }}",
    ]
    assert build_upload("logs-")["if"] == "${{ !cancelled() }}"  # wheels' logs too, when it fails
    assert build_upload("variant-")["if"] == "${{ !cancelled() }}"  # a batch's cells that built, when one fails
    # A wheels step that wrote nothing fails the job at the upload, rather than releasing without the cell's wheel.
    (tmp_path / "build" / "wheels").mkdir(parents=True)
    with pytest.raises(AssertionError, match="nothing matches"):
        upload(build_upload("wheel-"), {"matrix": {"job": "k-v", "kernel": "k"}}, tmp_path)


def test_the_build_job_takes_only_what_this_repositorys_workflow_signed():
    build = step("build", run="kernel-matrix build")
    assert build["env"]["SIGNER"] == "${{ github.repository }}"  # never the pull request's head repository
    assert '--reuse-published --signed-by "$SIGNER" --signer-repository-id "$SIGNER_ID"' in build["run"]
    assert build["env"]["SIGNER_ID"] == "${{ github.repository_id }}"  # GitHub's number: not a name taken again
    assert "trust-root" not in build["run"]  # Sigstore's public trust root
    assert_signer_refs_follow_the_default_branch(build)


def assert_signer_refs_follow_the_default_branch(step: dict) -> None:
    """Signed for a v* tag or for the repository's default branch, named by the event
    (GitHub's own metadata, not the pull request's), main where the event has no repository."""
    assert "--signer-ref 'refs/tags/v*' --signer-ref \"refs/heads/$DEFAULT_BRANCH\"" in step["run"]
    branch = step["env"]["DEFAULT_BRANCH"]
    assert render(branch, {"github": {"event": {"repository": {"default_branch": "trunk"}}}}) == "trunk"
    assert render(branch, {"github": {"event": {"schedule": "0 5 * * *"}}}) == "main"


def test_the_cells_wheels_never_share_a_name():
    # release-wheels merges every cell's wheel into one folder.
    cells = cli_matrix("full")["include"]
    names = [wheel_name(cell) for cell in cells]
    assert len(set(names)) == len(names) == len(cells)


def test_the_summary_step_merges_the_cells_tables(tmp_path):
    from kernel_matrix.cli.render import summary_markdown

    # What `kernel-matrix build` writes to build/summary.md for no cells: the two header lines the awk keeps once.
    header = summary_markdown([]) + "\n"
    assert len(header.splitlines()) == 2
    artifacts = {}
    for variant, status in (
        ("torch214-cxx11-cu130-x86_64-linux", "built"),
        ("torch214-cxx11-cpu-x86_64-linux", "FAILED"),
    ):
        workspace = tmp_path / variant
        (workspace / "build").mkdir(parents=True)
        (workspace / "build" / "summary.md").write_text(
            header + f"| k | {variant} | {status} | 9.0 | - | - | - | - |\n"
        )
        context = {"matrix": {"job": f"k-{variant}", "kernel": "k", "logs": "logs"}}
        name, entries = upload(build_upload("logs-"), context, workspace)
        artifacts[name] = entries
    summary_job = tmp_path / "summary-job"
    download(step("summary", "actions/download-artifact"), {}, artifacts, summary_job)
    summary = tmp_path / "step_summary.md"
    result = bash(summary_step()["run"], {"GITHUB_STEP_SUMMARY": str(summary)}, cwd=summary_job)
    assert result.returncode == 0, result.stderr
    lines = summary.read_text().splitlines()
    assert lines[:2] == header.splitlines() and len(lines) == 4
    assert {line.split(" | ")[2] for line in lines[2:]} == {"built", "FAILED"}


def summary_step() -> dict:
    (found,) = [s for s in JOBS["summary"]["steps"] if "run" in s]
    return found


@pytest.mark.parametrize("downloaded", ["no logs folder", "an empty logs folder"])
def test_the_summary_step_passes_when_no_build_left_a_table(tmp_path, downloaded):
    """A plan that failed leaves no build and no logs-* artifact: the summary says so, and is not a second
    red job beside the plan (awk on the unmatched glob exited 2)."""
    if downloaded == "an empty logs folder":
        (tmp_path / "logs").mkdir()
    summary = tmp_path / "step_summary.md"
    result = bash(summary_step()["run"], {"GITHUB_STEP_SUMMARY": str(summary)}, cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert summary.read_text() == "No build left a summary table (the plan failed, or no build ran).\n"


# --- releases: only tags and the default branch publish, and only publish sees the Hub token --------------------


def _no_gpu_jobs(context: dict) -> dict:
    context["needs"]["plan"]["outputs"]["gpu_jobs"] = ""
    return context


PUBLISH_RUNS = {
    "tag": (run_context("push", ref="refs/tags/v1.2.0"), True),
    "push to main": (run_context("push"), False),
    "same-repo-pr": (run_context("same-repo-pr"), False),
    "fork-pr": (run_context("fork-pr"), False),
    "dispatch, publish on main": (run_context("dispatch", publish=True), True),
    "dispatch, publish on a tag": (run_context("dispatch", ref="refs/tags/v1.2.0", publish=True), True),
    "dispatch, publish on a feature branch": (run_context("dispatch", ref="refs/heads/feature", publish=True), False),
    "dispatch, publish on a branch named like a tag": (
        run_context("dispatch", ref="refs/heads/v1.2.0", publish=True),
        False,
    ),
    "dispatch, no publish": (run_context("dispatch"), False),
    "dispatch, dry-run only": (run_context("dispatch", dry_run=True), False),
    "tag, a GPU test failed": (run_context("push", ref="refs/tags/v1.2.0", results={"test-gpu": "failure"}), False),
    "tag, a CPU test failed": (run_context("push", ref="refs/tags/v1.2.0", results={"test-cpu": "failure"}), False),
    "tag, a build failed": (run_context("push", ref="refs/tags/v1.2.0", results={"build": "failure"}), False),
    "tag, cancelled": (run_context("push", ref="refs/tags/v1.2.0", status="cancelled"), False),
    # A matrix with no GPU job (CPU-only, Python-only kernels): test-gpu is skipped, the release goes on.
    "tag, no GPU job": (
        _no_gpu_jobs(run_context("push", ref="refs/tags/v1.2.0", results={"test-gpu": "skipped"})),
        True,
    ),
    "dispatch on main, no GPU job": (
        _no_gpu_jobs(run_context("dispatch", publish=True, results={"test-gpu": "skipped"})),
        True,
    ),
    # GPU jobs were planned and did not run (GitHub skipped them): not a release.
    "tag, GPU tests skipped": (run_context("push", ref="refs/tags/v1.2.0", results={"test-gpu": "skipped"}), False),
}


@pytest.mark.parametrize("kind", PUBLISH_RUNS)
def test_publish_runs_only_for_tags_and_the_default_branch(kind):
    context, expected = PUBLISH_RUNS[kind]
    assert runs(JOBS["publish"], context) is expected


def test_the_publish_condition_names_the_default_branch_rule_word_for_word():
    # A manual publish needs a tag or the default branch; the table above checks what the condition means.
    assert DEFAULT_BRANCH_CLAUSE in " ".join(JOBS["publish"]["if"].split())


@pytest.mark.parametrize(
    ("context", "argv"),
    [
        (
            run_context("push", ref="refs/tags/v1.2.0"),
            ["--profile", "full", "--no-dry-run", "--sign", "--tag", "v1.2.0"],
        ),
        (run_context("dispatch", publish=True), ["--profile", "full", "--no-dry-run", "--sign"]),
        (run_context("dispatch", publish=True, dry_run=True, profile="pr"), ["--profile", "pr", "--dry-run", "--sign"]),
        (
            run_context("dispatch", ref="refs/tags/v2.0.0", publish=True, dry_run=True),
            ["--profile", "full", "--dry-run", "--sign", "--tag", "v2.0.0"],
        ),
    ],
    ids=["tag", "dispatch-main", "dispatch-dry-run-pr", "dispatch-tag-dry-run"],
)
def test_the_publish_command(context, argv, tmp_path):
    # A stand-in kernel-matrix records its arguments and whether the token reached it.
    stub = tmp_path / "bin" / "kernel-matrix"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" >"$ARGS"; printf "%s" "$HF_TOKEN" >"$TOKEN"\n')
    stub.chmod(0o755)
    s = step("publish", run="kernel-matrix publish")
    env = {**context["env"], **{k: render(v, context) for k, v in s["env"].items()}}
    env |= {"ARGS": str(tmp_path / "args"), "TOKEN": str(tmp_path / "token")}
    env["PATH"] = f"{stub.parent}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, **{name: text(value) for name, value in env.items()}}
    result = subprocess.run(["bash", "-e", "-c", s["run"]], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "args").read_text().splitlines() == ["publish", *argv]
    assert (tmp_path / "token").read_text() == "hf_secret"


def strings(node, where=""):
    """Every string of a workflow, with where it is (.jobs.publish.steps[3].env.HF_TOKEN)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from strings(value, f"{where}[{i}]")
    elif isinstance(node, str):
        yield where, node


def test_only_the_publish_job_sees_secrets_and_the_hub_environment():
    uses_secrets = [
        (path.name, where) for path in WORKFLOWS for where, value in strings(load(path)) if "secrets" in value
    ]
    publish_step = JOBS["publish"]["steps"].index(step("publish", run="kernel-matrix publish"))
    assert uses_secrets == [
        # The caller hands the secret to the reusable workflow, where only publish reads it.
        ("build.yml", ".jobs.kernel-matrix.secrets.HF_TOKEN"),
        ("reusable-build.yml", f".jobs.publish.steps[{publish_step}].env.HF_TOKEN"),
    ]
    assert JOBS["publish"]["steps"][publish_step]["env"]["HF_TOKEN"] == "${{ secrets.HF_TOKEN }}"
    environments = {(p.name, n): j.get("environment") for p in WORKFLOWS for n, j in load(p)["jobs"].items()}
    assert {k: v for k, v in environments.items() if v} == {
        ("reusable-build.yml", "publish"): "hub",
        # kernel-matrix's own release: PyPI's Trusted Publisher names this environment (release.yml).
        ("release.yml", "pypi"): {"name": "pypi", "url": "https://pypi.org/project/kernel-matrix/"},
    }
    assert JOBS["publish"]["permissions"] == {"contents": "read", "id-token": "write"}


def test_publish_signs_unless_the_caller_says_not_to_and_only_publish_may_ask_for_an_oidc_token():
    inputs = BUILD["on"]["workflow_call"]["inputs"]
    assert inputs["sign"] == {**inputs["sign"], "type": "boolean", "default": True}
    (publish_step,) = [s for s in JOBS["publish"]["steps"] if "kernel-matrix publish" in s.get("run", "")]
    assert '"$SIGN"' in publish_step["run"]
    for sign, expected in ((True, "--sign"), (False, "--no-sign")):
        context = {"inputs": {"sign": sign}, "github": {}}
        assert render(publish_step["env"]["SIGN"], context) == expected
    asking = sorted(name for name, job in JOBS.items() if "id-token" in job.get("permissions", {}))
    assert asking == ["publish"]


def test_only_the_release_jobs_hold_a_token_that_may_write():
    # github.token is not a secret, but in release-wheels and github-release it may write: no other step is
    # handed it.
    token_uses = [
        (path.name, where)
        for path in WORKFLOWS
        for where, value in strings(load(path))
        if re.search(r"github\.token|GITHUB_TOKEN|GH_TOKEN", f"{where} {value}", re.I)
    ]
    gh_step = JOBS["release-wheels"]["steps"].index(step("release-wheels", run="gh release"))
    own = RELEASE["jobs"]["github-release"]["steps"]
    (own_gh,) = [i for i, s in enumerate(own) if s.get("run", "").startswith("gh release")]
    # ... and the registry logins of images (packages: write) and build (packages: read), through stdin.
    logins = [
        ("reusable-build.yml", f".jobs.{job}.steps[{JOBS[job]['steps'].index(login)}].env.TOKEN")
        for job in ("images", "build")
        for login in registry_logins(job)
    ]
    assert len(logins) == 2 and all(
        login["env"]["TOKEN"] == "${{ github.token }}" for j in ("images", "build") for login in registry_logins(j)
    )
    assert sorted(token_uses) == sorted(
        [
            ("release.yml", f".jobs.github-release.steps[{own_gh}].env.GH_TOKEN"),
            ("reusable-build.yml", f".jobs.release-wheels.steps[{gh_step}].env.GH_TOKEN"),
            *logins,
        ]
    )
    assert JOBS["release-wheels"]["steps"][gh_step]["env"]["GH_TOKEN"] == "${{ github.token }}"
    assert own[own_gh]["env"]["GH_TOKEN"] == "${{ github.token }}"
    writers = {
        (path.name, name): job["permissions"]
        for path in WORKFLOWS
        for name, job in load(path)["jobs"].items()
        if "write" in str(job.get("permissions"))
    }
    # The caller's job grants what release-wheels asks (a called job can have no more than its caller's).
    caller = {"contents": "write", "id-token": "write", "packages": "write"}
    assert writers == {("build.yml", "kernel-matrix"): caller, **WRITERS}
    # Word for word too, comments aside: no other `<scope>: write` (or write-all) anywhere, top level included.
    code = "\n".join(re.sub(r"(^|\s)#.*", "", line) for p in WORKFLOWS for line in p.read_text().splitlines())
    found = sorted(re.findall(r"[\w-]+:\s*write(?:-all)?\b", code))
    assert found == ["contents: write"] * 3 + ["id-token: write"] * 3 + ["packages: write"] * 2
    # They run nothing of the repository's: no checkout, no kernel-matrix, no script.
    for steps in (JOBS["release-wheels"]["steps"], own, RELEASE["jobs"]["pypi"]["steps"]):
        assert not any("actions/checkout" in s.get("uses", "") for s in steps)


RELEASE_RUNS = {
    "tag": (run_context("push", ref="refs/tags/v1.2.0"), True),
    "tag, the publish failed": (run_context("push", ref="refs/tags/v1.2.0", results={"publish": "failure"}), False),
    "tag, the publish skipped": (run_context("push", ref="refs/tags/v1.2.0", results={"publish": "skipped"}), False),
    # A matrix with no GPU job: test-gpu skipped, publish done; the wheels go to the release all the same.
    "tag, no GPU job": (
        _no_gpu_jobs(run_context("push", ref="refs/tags/v1.2.0", results={"test-gpu": "skipped"})),
        True,
    ),
    "tag, cancelled": (run_context("push", ref="refs/tags/v1.2.0", status="cancelled"), False),
    "push to main": (run_context("push"), False),
    "same-repo-pr": (run_context("same-repo-pr"), False),
    "fork-pr": (run_context("fork-pr"), False),
    "dispatch, publish on main": (run_context("dispatch", publish=True), False),
    "dispatch, publish on a tag": (run_context("dispatch", ref="refs/tags/v1.2.0", publish=True), False),
}
# A tag of a repository whose kernels make no wheel (Python-only, tvm-ffi): nothing to attach.
_NO_WHEELS = run_context("push", ref="refs/tags/v1.2.0")
_NO_WHEELS["needs"]["plan"]["outputs"]["wheels"] = "false"
RELEASE_RUNS["tag, no job made a wheel"] = (_NO_WHEELS, False)


@pytest.mark.parametrize("kind", RELEASE_RUNS)
def test_wheels_are_released_only_for_pushed_tags(kind):
    context, expected = RELEASE_RUNS[kind]
    assert runs(JOBS["release-wheels"], context) is expected


def test_the_release_command(tmp_path):
    # A stand-in gh records its arguments, the token and the repository it was given.
    stub = tmp_path / "bin" / "gh"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" >"$ARGS"; printf "%s %s" "$GH_TOKEN" "$GH_REPO" >"$TOKEN"\n')
    stub.chmod(0o755)
    workspace = tmp_path / "job"
    (workspace / "wheels").mkdir(parents=True)
    names = ["img2gray-1+torch214cpu-cp39-abi3-manylinux_2_28_x86_64.whl", "img2gray-1+torch214cu130-cp39-abi3-x.whl"]
    for name in names:
        (workspace / "wheels" / name).write_text("")
    context = run_context("push", ref="refs/tags/v1.2.0")
    s = step("release-wheels", run="gh release")
    env = {k: render(v, context) for k, v in s["env"].items()}
    env |= {"ARGS": str(tmp_path / "args"), "TOKEN": str(tmp_path / "token")}
    env["PATH"] = f"{stub.parent}{os.pathsep}{os.environ['PATH']}"
    result = bash(s["run"], env, cwd=workspace)
    assert result.returncode == 0, result.stderr
    wheels = [f"wheels/{name}" for name in sorted(names)]
    assert (tmp_path / "args").read_text().splitlines() == [
        "release",
        "create",
        "v1.2.0",
        "--verify-tag",  # the tag that was pushed, never a new one
        "--generate-notes",
        *wheels,
    ]
    # No checkout to read the repository from: GH_REPO names it.
    assert (tmp_path / "token").read_text() == "ghs_job_token owner/kernel"


# --- kernel-matrix's own release (release.yml): a v* tag builds, tests and publishes the package ------------------


def release_step(job: str, run: str) -> dict:
    (found,) = [s for s in RELEASE["jobs"][job]["steps"] if s.get("run", "").startswith(run)]
    return found


def test_kernel_matrixs_release_runs_on_v_tags_build_test_pypi_github():
    assert RELEASE["on"] == {"push": {"tags": ["v*"]}}
    jobs = RELEASE["jobs"]
    assert {name: job.get("needs") for name, job in jobs.items()} == {
        "build": None,
        "test": "build",  # the wheel is tested before anything is published
        "pypi": "test",
        "github-release": "pypi",  # the same files, once PyPI has them
    }
    # Each job one command a maintainer runs the same way locally (docs/workflows.md).
    tag = {"TAG": "${{ github.ref_name }}"}
    assert release_step("build", "scripts/")["run"] == 'scripts/release-build "$TAG"'
    assert release_step("build", "scripts/")["env"] == tag
    assert release_step("test", "scripts/")["run"] == 'scripts/release-smoke "$TAG"'
    assert release_step("test", "scripts/")["env"] == tag
    for script in ("release-build", "release-smoke"):
        assert os.access(REPO / "scripts" / script, os.X_OK), script
    gh = release_step("github-release", "gh ")
    assert gh["run"] == 'gh release create "$TAG" --verify-tag --generate-notes dist/*'
    assert gh["env"] == {**tag, "GH_TOKEN": "${{ github.token }}", "GH_REPO": "${{ github.repository }}"}
    # The build needs the history: release.yaml's commit must be one of it (scripts/release-build).
    (checkout,) = [s for s in jobs["build"]["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert checkout["with"]["fetch-depth"] == 0


def test_kernel_matrix_goes_to_pypi_by_trusted_publishing_only():
    pypi = RELEASE["jobs"]["pypi"]
    # OIDC: the job's token is exchanged for a short-lived PyPI one; no stored token anywhere, and the
    # permission to ask for an OIDC token in this job only, behind the protected environment `pypi`.
    assert pypi["permissions"] == {"id-token": "write"} and pypi["environment"]["name"] == "pypi"
    (publish,) = [s for s in pypi["steps"] if s.get("uses", "").startswith("pypa/gh-action-pypi-publish@")]
    assert "with" not in publish  # no password, no repository-url: PyPI, by its trusted publisher
    assert not any("secrets" in value for _, value in strings(RELEASE))
    for name, job in RELEASE["jobs"].items():
        assert name == "pypi" or "id-token" not in job.get("permissions", {}), name


def test_kernel_matrixs_release_files_travel_from_build_to_pypi_and_github(tmp_path):
    """What the build job uploads is what the other jobs download into dist/, where their commands read it."""
    workspace = tmp_path / "build-job"
    names = ["kernel_matrix-1.2.3-py3-none-any.whl", "kernel_matrix-1.2.3.tar.gz"]
    for name in names:
        (workspace / "dist" / name).parent.mkdir(parents=True, exist_ok=True)
        (workspace / "dist" / name).write_text(name)
    (upload_step,) = [s for s in RELEASE["jobs"]["build"]["steps"] if "upload-artifact@" in s.get("uses", "")]
    name, entries = upload(upload_step, {}, workspace)
    assert sorted(entries) == names
    for job in ("test", "pypi", "github-release"):
        (spec,) = [s for s in RELEASE["jobs"][job]["steps"] if "download-artifact@" in s.get("uses", "")]
        assert download(spec, {}, {name: entries}, tmp_path / job) == []
        assert sorted(p.name for p in (tmp_path / job / "dist").iterdir()) == names, job
    # gh attaches both, to the pushed tag's release only (--verify-tag: never a new tag).
    stub = tmp_path / "bin" / "gh"
    stub.parent.mkdir()
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" >"$ARGS"\n')
    stub.chmod(0o755)
    gh = release_step("github-release", "gh ")
    env = {"TAG": "v1.2.3", "GH_TOKEN": "t", "GH_REPO": "o/r", "ARGS": str(tmp_path / "args")}
    env["PATH"] = f"{stub.parent}{os.pathsep}{os.environ['PATH']}"
    result = bash(gh["run"], env, cwd=tmp_path / "github-release")
    assert result.returncode == 0, result.stderr
    args = (tmp_path / "args").read_text().splitlines()
    assert args == ["release", "create", "v1.2.3", "--verify-tag", "--generate-notes", *[f"dist/{n}" for n in names]]


# --- concurrency: superseded pull-request runs are cancelled, releases never ------------------------------------


@pytest.mark.parametrize("path", [p for p in WORKFLOWS if "concurrency" in load(p)], ids=lambda p: p.name)
def test_concurrency_cancels_superseded_pull_requests_only(path):
    concurrency = load(path)["concurrency"]

    def group(context):
        context = {**context, "github": {**context["github"], "workflow": load(path)["name"]}}
        return render(concurrency["group"], context), render(concurrency["cancel-in-progress"], context)

    first, second = group(run_context("same-repo-pr", run_id=1)), group(run_context("same-repo-pr", run_id=2))
    assert first == second and first[1] is True, "a new push to a pull request cancels its older run"
    other_pr = run_context("same-repo-pr", run_id=3)
    other_pr["github"]["ref"] = "refs/pull/8/merge"
    assert group(other_pr)[0] != first[0], "pull requests do not cancel each other"
    for kind, ref in (("push", "refs/tags/v1.2.0"), ("push", "refs/heads/main"), ("dispatch", "refs/heads/main")):
        a, b = group(run_context(kind, ref=ref, run_id=1)), group(run_context(kind, ref=ref, run_id=2))
        # A group of its own: neither cancelled nor left pending behind another run and then replaced.
        assert a[0] != b[0] and a[1] is False and a[0] != first[0], (kind, ref)


# --- the other workflows and the GPU job's script ---------------------------------------------------------------


def test_a_schedule_checks_upstream_releases():
    """upstream.yml runs the reusable check daily, with kernel-matrix from this checkout; a kernel's
    caller runs the same file from its pin (test_init.py)."""
    workflow = load(WORKFLOW_DIR / "upstream.yml")
    assert "schedule" in workflow["on"] and "workflow_dispatch" in workflow["on"]
    (caller,) = workflow["jobs"].values()
    assert caller["uses"] == "./.github/workflows/reusable-upstream.yml"
    # img2gray is not published from here: no published variant to check.
    assert caller["with"] == {"matrix-file": "build_matrix.yaml", "kernel-matrix": ".", "published": False}
    reusable = load(WORKFLOW_DIR / "reusable-upstream.yml")
    assert set(reusable["on"]["workflow_call"]["inputs"]) == set(caller["with"])
    jobs = reusable["jobs"]
    assert list(jobs) == ["check-upstream", "check-published"]
    for job in jobs.values():
        install = job["steps"][-2]
        assert install["env"] == {"KERNEL_MATRIX": "${{ inputs.kernel-matrix }}"}
        assert '"$KERNEL_MATRIX"' in install["run"]
        assert job["permissions"] == {"contents": "read"}
    check = jobs["check-upstream"]["steps"][-1]
    assert check["run"] == "kernel-matrix matrix --check-upstream"
    assert check["env"] == {"KERNEL_MATRIX_FILE": "${{ inputs.matrix-file }}"}
    # Every published variant, checked against this repository's own workflow (no token: public repos).
    published = jobs["check-published"]
    assert published["if"] == "${{ inputs.published }}"
    assert reusable["on"]["workflow_call"]["inputs"]["published"]["default"] is True
    check = published["steps"][-1]
    assert check["run"].startswith('kernel-matrix verify --published --signed-by "$REPOSITORY" ')
    assert check["env"]["REPOSITORY"] == "${{ github.repository }}"
    assert set(check["env"]) == {"KERNEL_MATRIX_FILE", "REPOSITORY", "REPOSITORY_ID", "DEFAULT_BRANCH"}
    assert check["env"]["REPOSITORY_ID"] == "${{ github.repository_id }}"
    assert '--signed-by "$REPOSITORY" --signer-repository-id "$REPOSITORY_ID" ' in check["run"]
    assert_signer_refs_follow_the_default_branch(check)


def test_ci_runs_the_projects_test_command_and_everything_on_main_and_nightly():
    workflow = load(WORKFLOW_DIR / "ci.yml")
    assert set(workflow["on"]) == {"push", "pull_request", "schedule", "workflow_dispatch"}
    gate, full = workflow["jobs"]["test"], workflow["jobs"]["full"]
    assert gate["steps"][-1]["run"] == "scripts/test" and full["steps"][-1]["run"] == "scripts/test --full"
    assert gate["if"] == "${{ github.event_name != 'schedule' && github.event_name != 'workflow_dispatch' }}"
    assert "github.ref == 'refs/heads/main'" in full["if"] and "'schedule'" in full["if"]
    assert gate["permissions"] == full["permissions"] == {"contents": "read"}


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--cpu-only"],
        ["--gpu", "v"],
        ["v", "w"],
        ["--cpu-only", "--cpu-only", "v"],
        ["v", "--cpu-only"],
        ["--kernel", "v"],
        ["--kernel", "", "v"],
        ["--kernel", "a", "--kernel", "b", "v"],
    ],
)
@pytest.mark.processes
def test_test_variant_needs_one_variant_name(argv):
    for command in ([REPO / "scripts" / "test-variant"], [BIN / "kernel-matrix", "test-variant"]):
        result = subprocess.run([*command, *argv], capture_output=True, text=True)
        assert result.returncode == 2 and USAGE in result.stderr, command


@pytest.mark.parametrize("flags", [[], ["--cpu-only"]])
@pytest.mark.processes  # Python started by bash (scripts/test-variant)
def test_test_variant_refuses_a_variant_that_is_not_built(flags):
    command = [REPO / "scripts" / "test-variant", *flags, "torch299-cxx11-cu999-x86_64-linux"]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 3, result.stderr
    assert "build/torch299-cxx11-cu999-x86_64-linux is not a built variant" in result.stderr


# Stand-ins for the cell's environment: its python runs the real interpreter with a fake torch (CUDA build and
# GPU as the test says; CUDA_VISIBLE_DEVICES="" hides the GPU, as for torch), records pip instead of installing;
# its kernel-matrix prints the cell and records the test it is asked to run.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = -m ] && [ "$2" = pip ]; then shift 2; echo "pip $*" >>"$LOG"; exit 0; fi
PYTHONPATH=$FAKE_TORCH exec "$REAL_PYTHON" "$@"
"""
FAKE_KERNEL_MATRIX = """#!/bin/sh
case $1 in
matrix) [ "$3" = --variant ] && "$REAL_PYTHON" -c "$PICK" "$4" ;;
test) echo "kernel-matrix $* CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}" >>"$LOG" ;;
*) exit 64 ;;
esac
"""
# `matrix --json --variant V`: the cell of CELLS_JSON named V.
PICK = """import json, os, sys
print(json.dumps({"include": [c for c in json.loads(os.environ["CELLS_JSON"]) if c["variant"] == sys.argv[1]]}))"""
# torch/version.py, as real torch has it: read without importing torch where torch cannot be imported.
FAKE_TORCH_VERSION = """import os
__version__ = "2.14.0"
cuda = os.environ["TORCH_CUDA"] or None
"""
FAKE_TORCH = """import os, types
from . import version
__version__ = version.__version__
cuda = types.SimpleNamespace(
    is_available=lambda: os.environ["GPU"] == "1" and os.environ.get("CUDA_VISIBLE_DEVICES") != "",
    get_device_name=lambda index: "Fake H200",
)
"""


def run_test_variant(
    tmp_path,
    cell: dict,
    *flags,
    torch_cuda: str | None,
    gpu: bool,
    batch: tuple[dict, ...] = (),
    metadata: str = "{}",
    build_dir: str = "build",
) -> tuple[int, list[str], str]:
    """Run the packaged test-variant, as `kernel-matrix test-variant` does, in a kernel's repository holding a
    built cell (and the batch's others, tested together as CELL,OTHER,...), with the stand-ins; return its
    exit, log and stderr."""
    repo = tmp_path / "repo"
    for built in (cell, *batch):
        (repo / build_dir / built["variant"]).mkdir(parents=True)
        (repo / build_dir / built["variant"] / "metadata.json").write_text(metadata)
    venv = tmp_path / "venv"
    for name, body in (("python", FAKE_PYTHON), ("kernel-matrix", FAKE_KERNEL_MATRIX)):
        (venv / "bin").mkdir(parents=True, exist_ok=True)
        (venv / "bin" / name).write_text(body)
        (venv / "bin" / name).chmod(0o755)
    (tmp_path / "torch" / "torch").mkdir(parents=True)
    (tmp_path / "torch" / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "torch" / "torch" / "version.py").write_text(FAKE_TORCH_VERSION)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env |= {
        "PYTHON": sys.executable,
        "REAL_PYTHON": sys.executable,
        "TEST_VARIANT_VENV": str(venv),
        "FAKE_TORCH": str(tmp_path / "torch"),
        "LOG": str(tmp_path / "log"),
        "CELLS_JSON": json.dumps([cell, *batch]),
        "PICK": PICK,
        "TORCH_CUDA": torch_cuda or "",
        "GPU": "1" if gpu else "0",
        "KERNEL_MATRIX_INSTALL": "kernel-matrix==9.9.9",
    }
    (tmp_path / "log").write_text("")
    result = subprocess.run(
        [*TEST_VARIANT, *flags, ",".join(c["variant"] for c in (cell, *batch))],
        env=env,
        capture_output=True,
        text=True,
        cwd=repo,
    )
    return result.returncode, (tmp_path / "log").read_text().splitlines(), result.stderr


def a_cell(backend: str) -> dict:
    cells = cli_matrix("pr")["include"]
    return next(c for c in cells if c["backend"] == backend and c["arch"] == "x86_64")


@pytest.mark.parametrize(
    ("backend", "flags", "torch_cuda", "gpu", "hidden", "error"),
    [
        # test-gpu: a CUDA variant runs on the GPU, and fails rather than skip its CUDA cases without one.
        ("cuda", [], "cell", True, False, None),
        ("cuda", [], "cell", False, None, "torch sees no GPU"),
        # test-cpu: no GPU needed, and one that is there is hidden, so the run is the same on every machine.
        ("cuda", ["--cpu-only"], "cell", False, True, None),
        ("cuda", ["--cpu-only"], "cell", True, True, None),
        # The variant's .so links torch's CUDA libraries: a CPU build of torch is refused, GPU or not.
        ("cuda", ["--cpu-only"], None, False, None, "torch is built for no CUDA (a CPU build), and CUDA 1"),
        ("cuda", [], "11.8", True, None, "torch is built for CUDA 11.8, and CUDA 1"),
        # A CPU variant needs no GPU either way, and a CPU build of torch.
        ("cpu", [], None, False, False, None),
        ("cpu", ["--cpu-only"], None, True, True, None),
        ("cpu", [], "13.0", False, None, "torch is built for CUDA 13.0, and no CUDA (a CPU build) is needed"),
    ],
)
@pytest.mark.processes  # Python started by bash (run: lines)
def test_test_variant_checks_torch_and_the_gpu(tmp_path, backend, flags, torch_cuda, gpu, hidden, error):
    cell = a_cell(backend)
    torch_cuda = cell["cuda"] if torch_cuda == "cell" else torch_cuda
    code, log, stderr = run_test_variant(tmp_path, cell, *flags, torch_cuda=torch_cuda, gpu=gpu)
    index = [] if cell["torch_index"] == "pypi" else ["--index-url", cell["torch_index"]]
    assert f"pip install --quiet --disable-pip-version-check {' '.join([*index, cell['torch_spec']])}" in log
    assert log[0] == "pip install --quiet --disable-pip-version-check kernel-matrix==9.9.9"  # the caller's release
    tests = [line for line in log if line.startswith("kernel-matrix test")]
    if error:
        assert code != 0 and error in stderr, stderr
        assert tests == []
    else:
        assert code == 0, stderr
        visible = "" if hidden else "unset"
        # The GPU job's suite must see the GPU too (--require-gpu): it runs the CUDA cases or fails.
        required = " --require-gpu" if backend == "cuda" and not flags else ""
        assert tests == [f"kernel-matrix test build/{cell['path']}{required} CUDA_VISIBLE_DEVICES={visible}"]
        assert ("GPU: Fake H200" in stderr) is (backend == "cuda" and not flags)


@pytest.mark.processes
def test_test_variant_tests_the_variant_in_the_build_folder_it_is_given(tmp_path):
    cell = a_cell("cpu")
    code, log, stderr = run_test_variant(
        tmp_path, cell, "--build-dir", "out/b", torch_cuda=None, gpu=False, build_dir="out/b"
    )
    assert code == 0, stderr
    tests = [line for line in log if line.startswith("kernel-matrix test")]
    assert tests == [f"kernel-matrix test out/b/{cell['path']} CUDA_VISIBLE_DEVICES=unset"]
    # Not built there: refused before any environment is made, naming the folder it looked in.
    code, log, stderr = run_test_variant(
        tmp_path / "elsewhere", cell, "--build-dir", "out/c", torch_cuda=None, gpu=False
    )
    assert code == 3 and f"out/c/{cell['variant']} is not a built variant" in stderr, stderr
    assert log == []


@pytest.mark.processes
def test_test_variant_refuses_a_cell_it_cannot_read_and_goes_on_with_the_batch(tmp_path):
    """The environment's kernel-matrix (KERNEL_MATRIX_INSTALL: maybe another release) plans a cell without a
    field test-variant reads: that variant fails in one line, and the batch's next one is still tested."""
    cpu = a_cell("cpu")
    broken = {k: v for k, v in a_cell("cuda").items() if k != "torch_index"}
    code, log, stderr = run_test_variant(tmp_path, broken, "--cpu-only", torch_cuda=None, gpu=False, batch=(cpu,))
    assert "kernel-matrix matrix --json: a cell without path, backend, torch_spec, torch_index" in stderr, stderr
    assert "Traceback" not in stderr
    assert [line for line in log if line.startswith("kernel-matrix test")] == [
        f"kernel-matrix test build/{cpu['path']} CUDA_VISIBLE_DEVICES="
    ]
    assert code == 1 and stderr.rstrip().endswith(f"error: 1 of 2 variants failed: {broken['variant']}"), stderr


@pytest.mark.processes
def test_test_variant_tests_a_batch_each_in_turn_and_fails_if_one_failed(tmp_path):
    """A build workflow job's batch, CPU,CUDA --cpu-only with a CUDA build of torch: the CPU variant is refused
    (it needs a CPU build), the CUDA one after it is still tested, and the batch fails naming the one."""
    cpu, cuda = a_cell("cpu"), a_cell("cuda")
    code, log, stderr = run_test_variant(tmp_path, cpu, "--cpu-only", torch_cuda=cuda["cuda"], gpu=False, batch=(cuda,))
    # One failure: the batch exits with its own code, as the CPU variant alone does (docs/exit-codes.md).
    alone, _, _ = run_test_variant(tmp_path / "alone", cpu, "--cpu-only", torch_cuda=cuda["cuda"], gpu=False)
    assert code == alone != 0, stderr
    assert [line for line in log if line.startswith("kernel-matrix test")] == [
        f"kernel-matrix test build/{cuda['path']} CUDA_VISIBLE_DEVICES="
    ]
    assert f"== test-variant {cpu['variant']}" in stderr and f"== test-variant {cuda['variant']}" in stderr
    assert stderr.rstrip().endswith(f"error: 1 of 2 variants failed: {cpu['variant']}")
    # The same CPU variant with a CPU build of torch passes.
    code, _, stderr = run_test_variant(tmp_path / "again", cpu, torch_cuda=None, gpu=False, batch=())
    assert code == 0, stderr


@pytest.mark.parametrize(
    ("depends", "installed", "error"),
    [
        # the loader's table: a general name, and the CUDA backend's own
        (["einops", "nvidia-cutlass-dsl"], "einops nvidia-cutlass-dsl", None),
        ([], None, None),
        # a name the loader does not know is never turned into a package to install
        (["requests"], None, 'python-depends "requests" is not a dependency the kernels loader knows'),
        # nor is another backend's
        (["onednn"], None, 'python-depends "onednn" is not a dependency the kernels loader knows for backend "cuda"'),
        # the metadata's backend is the cell's: it cannot pick another backend's table (nki for neuron)
        ({"backend": "neuron", "depends": ["nki"]}, None, 'backend "neuron", but the cell is cuda'),
        (5, None, "python-depends is not a list of names: 5"),
    ],
)
@pytest.mark.processes  # Python started by bash (run: lines)
def test_test_variant_installs_the_variants_python_depends_the_loader_knows(tmp_path, depends, installed, error):
    cell = a_cell("cuda")
    backend = depends.pop("backend") if isinstance(depends, dict) else "cuda"
    depends = depends["depends"] if isinstance(depends, dict) else depends
    metadata = json.dumps({"backend": {"type": backend}, "python-depends": depends})
    code, log, stderr = run_test_variant(
        tmp_path, cell, "--cpu-only", torch_cuda=cell["cuda"], gpu=False, metadata=metadata
    )
    extra = [line for line in log if line.startswith("pip ") and ("einops" in line or "cutlass" in line)]
    tests = [line for line in log if line.startswith("kernel-matrix test")]
    if error:
        assert code == 2 and error in stderr and tests == [] and extra == [], stderr
    else:
        assert code == 0, stderr
        assert extra == ([f"pip install --quiet --disable-pip-version-check {installed}"] if installed else [])
        assert len(tests) == 1


@pytest.mark.parametrize("variants", ["a,", ",a", "a,,b"])
def test_test_variant_refuses_an_empty_name_in_a_batch(tmp_path, variants, monkeypatch, capsys):
    (tmp_path / "build" / "a").mkdir(parents=True)
    (tmp_path / "build" / "a" / "metadata.json").write_text("{}")
    (tmp_path / "build" / "b").mkdir(parents=True)
    (tmp_path / "build" / "b" / "metadata.json").write_text("{}")
    monkeypatch.setenv("PYTHON", "false")
    request = test_variant.parse(["--build-dir", str(tmp_path / "build"), variants])
    # A usage error (2) beside no Python (4, PYTHON=false): test-variant's own code, 6 (docs/exit-codes.md).
    assert test_variant.run(request, "kernel-matrix==9.9.9") == 6
    stderr = capsys.readouterr().err
    assert USAGE in stderr and "variants failed: " in stderr, stderr


def test_test_variant_removes_only_a_batchs_own_environments(tmp_path, monkeypatch, capsys):
    """After each variant of a batch its environment, build/.cache/test-variant/<name>, is removed: never a
    path a mistyped name points elsewhere."""
    victim = tmp_path / "build" / ".cache" / "victim"
    victim.mkdir(parents=True)
    own = tmp_path / "build" / ".cache" / "test-variant" / "a"
    own.mkdir(parents=True)
    monkeypatch.delenv("TEST_VARIANT_VENV", raising=False)
    monkeypatch.setenv("PYTHON", "false")
    request = test_variant.parse(["--build-dir", str(tmp_path / "build"), "a,../victim"])
    # a is not built (3); ../victim is not a variant's name (2): the batch's own code, 6.
    assert test_variant.run(request, "kernel-matrix==9.9.9") == 6
    stderr = capsys.readouterr().err
    assert "error: variant '../victim': not a variant name (one folder name)" in stderr, stderr
    assert "error: 2 of 2 variants failed: a ../victim" in stderr
    assert victim.is_dir() and not own.exists()


# --- builder images shared through the repository's packages ------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "ref", "inputs", "shared", "reuse"),
    [
        ("push", "refs/heads/main", {}, True, True),
        ("dispatch", "refs/heads/main", {}, True, True),
        ("push", "refs/tags/v1", {}, True, False),  # a release makes its own images
        ("dispatch", "refs/heads/main", {"publish": True}, True, False),
        ("push", "refs/heads/main", {"share-builders": False}, False, None),
        ("same-repo-pr", "", {}, False, None),
        ("fork-pr", "", {}, False, None),
    ],
    ids=["push", "dispatch", "tag", "publishing-dispatch", "not-shared", "same-repo-pr", "fork-pr"],
)
def test_builder_images_are_shared_outside_pull_requests_and_releases_take_none_by_tag(
    kind, ref, inputs, shared, reuse
):
    context = run_context(kind, **({"ref": ref} if ref else {}))
    context["inputs"] |= inputs
    context["needs"]["plan"]["outputs"]["images"] = '{"include":[{}]}'
    images = JOBS["images"]
    assert runs(images, context) is shared
    make = step("images", run="kernel-matrix builder-images")
    if shared:
        assert (render(make["env"]["REUSE"], context) == "true") is reuse
    # The build job runs after the images job or without it, and pulls only what that job listed.
    results = {"images": "success" if shared else "skipped"}
    build = JOBS["build"]
    after = context | {"results": results}
    assert runs(build, after)
    seen = after | {"needs": {**context["needs"], "images": {"result": results["images"]}}}
    for taken in (step("build", uses="actions/download-artifact"), *registry_logins("build")):
        assert runs(taken, seen) is shared
    listed = render(BUILDER_IMAGES, seen | {"runner": {"temp": "/tmp/runner"}})
    assert listed == ("/tmp/runner/builder-images" if shared else "")
    # A failed images job: the builds still run, each making its own images.
    failed = context | {"results": {"images": "failure"}}
    assert runs(build, failed) and not runs(
        step("build", uses="actions/download-artifact"),
        failed | {"needs": {**context["needs"], "images": {"result": "failure"}}},
    )
    assert not runs(
        images, context | {"needs": {"plan": {"outputs": {**context["needs"]["plan"]["outputs"], "images": ""}}}}
    )


def test_the_images_jobs_command_pushes_under_this_repositorys_packages_by_the_token_on_stdin(tmp_path):
    """The images job's two commands, run as written with a stand-in `docker` and `kernel-matrix` that
    record their arguments and stdin: the token reaches docker only on stdin, never a command line; the
    repository is the caller's, in lower case as registries require."""
    record = tmp_path / "record"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, stdin in (("docker", f"sed 's/^/stdin: /' >> {record}; echo >> {record}"), ("kernel-matrix", "")):
        (bin_dir / tool).write_text(f"#!/bin/sh\nprintf '%s\\n' \"{tool} $*\" >> {record}\n{stdin}\n")
        (bin_dir / tool).chmod(0o755)
    context = run_context("push")
    context["matrix"] = {"kernel": "relu", "variant": "torch214-cxx11-cu130-x86_64-linux"}
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "GITHUB_REPOSITORY": "Owner/Kernel"}
    env |= {"REGISTRY": render(BUILD["env"]["REGISTRY"], context), "GITHUB_ACTOR": "someone"}
    for s in (*registry_logins("images"), step("images", run="kernel-matrix builder-images")):
        step_env = {
            name: text(render(value, context | {"github": context["github"] | {"actor": "someone"}}))
            for name, value in s["env"].items()
        }
        result = subprocess.run(
            ["bash", "-e", "-c", s["run"]],
            env={**env, **step_env},
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        assert result.returncode == 0, result.stderr
    lines = record.read_text().splitlines()
    assert lines[0] == "docker login ghcr.io --username someone --password-stdin"
    assert lines[1] == "stdin: ghs_job_token"
    assert lines[2] == (
        "kernel-matrix builder-images --kernel relu --variant torch214-cxx11-cu130-x86_64-linux --push "
        "ghcr.io/owner/kernel/kernel-matrix-builder --reuse "
        "--out builder-images/relu-torch214-cxx11-cu130-x86_64-linux.json"
    )
    assert all("ghs_job_token" not in line for line in lines if not line.startswith("stdin:"))
    upload = step("images", uses="actions/upload-artifact")
    assert upload["with"]["path"] == "builder-images/" and upload["with"]["if-no-files-found"] == "error"
    download = step("build", uses="actions/download-artifact")
    assert download["with"] == {
        "pattern": "builder-image-*",
        "merge-multiple": True,
        "path": "${{ runner.temp }}/builder-images",
    }
    assert upload["with"]["name"] == "builder-image-${{ matrix.kernel }}-${{ matrix.variant }}"
