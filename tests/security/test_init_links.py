"""Issue 39 finding 4: `kernel-matrix init` in a repository whose files are someone else's.
It never follows a link out of the repository, for writing (a `.github` or
`.github/workflows` link to elsewhere) or reading (a linked folder or build.toml while it
searches for kernels: a link to / walked the machine's files and printed the paths of
build.toml files outside); and --repository is OWNER/NAME by GitHub's rules, never a path."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import img2gray_as, kernel_matrix, snapshot
from github_standin import GitHub, stand_in


@pytest.fixture(scope="module")
def github(tmp_path_factory) -> GitHub:
    return stand_in(tmp_path_factory.mktemp("github"))


@pytest.fixture(autouse=True)
def on_github(github, monkeypatch) -> None:
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(github.config))


def init(*args: str, cwd: Path, github: GitHub):
    return kernel_matrix("init", *args, "--ref", github.head, cwd=cwd)


@pytest.mark.parametrize("linked", [".github", ".github/workflows"])
@pytest.mark.processes
def test_init_never_writes_through_a_link_out_of_the_repository(tmp_path, github, linked):
    kernel = img2gray_as(tmp_path / "repository", "gray")
    outside = tmp_path / "outside"
    outside.mkdir()
    (kernel / linked).parent.mkdir(parents=True, exist_ok=True)
    (kernel / linked).symlink_to(outside, target_is_directory=True)
    result = init(cwd=kernel, github=github)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr == (
        f"error: {linked}: a link out of the repository (to {outside}); init never writes through one "
        "(nothing written)\n"
    )
    assert list(outside.iterdir()) == [] and not (kernel / "build_matrix.yaml").exists()


@pytest.mark.processes
def test_a_link_to_a_folder_inside_the_repository_is_written_through(tmp_path, github):
    kernel = img2gray_as(tmp_path / "repository", "gray")
    (kernel / "ci").mkdir()
    (kernel / ".github").symlink_to("ci", target_is_directory=True)
    assert init(cwd=kernel, github=github).returncode == 0
    assert (kernel / "ci" / "workflows" / "kernel-matrix.yml").is_file()


@pytest.mark.processes
def test_the_kernel_search_follows_no_linked_folder_or_build_toml(tmp_path, github):
    """Linked folders at every depth of the search (the deepest was searched with rglob, which walked a
    link to / through the machine), and a build.toml linked to a file outside: none is read or named."""
    outside = tmp_path / "outside"
    img2gray_as(outside / "deep" / "er", "gray-outside")  # a kernel outside the repository, below the links
    repository = tmp_path / "repository"
    img2gray_as(repository / "kernels", "gray")
    (repository / "vendored").symlink_to(outside, target_is_directory=True)
    (repository / "a" / "b" / "c").mkdir(parents=True)
    (repository / "a" / "b" / "c" / "linked").symlink_to(outside, target_is_directory=True)
    (repository / "kernels" / "evil").mkdir()
    (repository / "kernels" / "evil" / "build.toml").symlink_to(outside / "deep" / "er" / "gray-outside" / "build.toml")
    before = snapshot(outside)
    result = init(cwd=repository, github=github)
    assert result.returncode == 0, result.stderr
    assert "gray-outside" not in result.stdout + result.stderr and str(outside) not in result.stdout + result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("note: kernels/evil")] == [
        "note: kernels/evil: left out of build_matrix.yaml: a link out of the repository; init never reads through one"
    ]
    assert "kernels:\n- kernels/gray\n" in (repository / "build_matrix.yaml").read_text()
    assert snapshot(outside) == before


@pytest.mark.processes
def test_a_root_build_toml_linked_out_of_the_repository_is_refused(tmp_path, github):
    secret = img2gray_as(tmp_path / "outside", "gray-outside")
    repository = tmp_path / "repository"
    repository.mkdir()
    (repository / "build.toml").symlink_to(secret / "build.toml")
    result = init(cwd=repository, github=github)
    assert result.returncode == 2 and result.stderr == (
        "error: build.toml: a link out of the repository; init never reads through one (nothing written)\n"
    )
    assert sorted(p.name for p in repository.iterdir()) == ["build.toml"]


@pytest.mark.parametrize(
    "repository",
    [
        "a/..",
        "a/.",
        "a/.x",
        "a/-x",
        "../b",
        "-a/b",
        "a-/b",
        "a--b/c",
        "a/b/c",
        "a/",
        "/b",
        "a" * 40 + "/b",
        "a/" + "b" * 101,
    ],
)
@pytest.mark.processes
def test_init_refuses_a_repository_that_is_not_owner_slash_name(tmp_path, github, repository):
    kernel = img2gray_as(tmp_path / "repository", "gray")
    result = init("--repository", repository, cwd=kernel, github=github)
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: --repository {repository!r}: expected OWNER/NAME")
    assert not (kernel / "build_matrix.yaml").exists() and not (kernel / ".github").exists()
