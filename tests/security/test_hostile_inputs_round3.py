"""Attacks from issue 23 items 4, 6 and 7 that need no container engine: values
injected into generated files, oversized or deeply nested inputs, path errors,
a hostile Hub repository for `verify`, and `clean` pointed where it must not
reach. Each is refused with one line and a distinct exit code, or neutralised,
and nothing is written outside the build directory."""

import json
import sys

import pytest
import yaml
from conftest import REPO
from huggingface_hub.repocard import REGEX_YAML_BLOCK

from kernel_matrix.buildtoml import load_build_toml
from kernel_matrix.kernel_card import kernel_card
from kernel_matrix.matrix import load_matrix, select
from kernel_matrix.wheels import wheel_spec, write_project

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

# A license that, interpolated into TOML text, closes its string and inline table
# and adds a setuptools command class: code the wheel build would run.
TOML_INJECTION = 'MIT"}\n[tool.setuptools.cmdclass]\nbuild_py = "pwn.Build"\n[x]\ny = {z = "'
# The same against the card's YAML front matter: a key of its own, and an end of it.
YAML_INJECTION = "mit\nlicense_link: https://evil.example\n---\n# pwned"


def set_toml(kernel, old, new):
    path = kernel / "build.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def hostile_license(kernel, license):
    set_toml(kernel, 'license = "Apache-2.0"', f"license = {json.dumps(license)}")
    config = load_build_toml(kernel)
    assert config.general.license == license  # build.toml takes it: it is data
    return config


@pytest.mark.parametrize("license", [TOML_INJECTION, YAML_INJECTION])
def test_a_license_is_data_in_the_wheels_pyproject(kernel_copy, tmp_path, license):
    config = hostile_license(kernel_copy, license)
    variant = tmp_path / "variant"
    variant.mkdir()
    (variant / "metadata.json").write_text("{}")
    cell = min(select(load_matrix(REPO / "build_matrix.yaml"), only="backend=cpu"), key=lambda c: c.name)
    spec = wheel_spec(
        cell, name=config.general.name, package=config.general.python_name, kernel_version=1, license=license
    )
    project = tmp_path / "project"
    write_project(variant, project, spec, cell.name)
    parsed = tomllib.loads((project / "pyproject.toml").read_text())
    assert parsed["project"]["license"] == {"text": license}
    assert set(parsed) == {"build-system", "project", "tool"}
    assert set(parsed["tool"]["setuptools"]) == {"packages", "include-package-data", "package-data"}


@pytest.mark.parametrize("license", [TOML_INJECTION, YAML_INJECTION])
def test_a_license_is_data_in_the_hub_cards_front_matter(kernel_copy, license):
    config = hostile_license(kernel_copy, license)
    repo_id = 'org/x", version=0); import os; os.system("id"); ("'
    card = kernel_card(config, repo_id, {})
    # As the Hub reads it: the first ---...--- block, as YAML.
    match = REGEX_YAML_BLOCK.search(card)
    assert match is not None
    assert yaml.safe_load(match.group(2)) == {"license": license.lower(), "tags": ["kernel"]}
    # The repo id is one Python string literal in the usage snippet.
    (snippet,) = [line for line in card.splitlines() if line.startswith(f"{config.general.python_name} = ")]
    assert snippet == f"{config.general.python_name} = get_kernel({json.dumps(repo_id)}, version=1)"
