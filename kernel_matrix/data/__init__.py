"""Version tables kept as data (YAML beside this file), loaded once."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml


@cache
def load(name: str) -> Any:
    """The parsed table data/<name>.yaml."""
    return yaml.safe_load(resources.files(__package__).joinpath(f"{name}.yaml").read_text())
