"""The base of every config-file model (build.toml, build_matrix.yaml)."""

from pydantic import BaseModel, ConfigDict


def _kebab(name: str) -> str:
    return name.replace("_", "-")


class Section(BaseModel):
    """Frozen; keys written in kebab-case (cuda-capabilities); unknown keys are
    errors, so a typo never silently changes what gets built."""

    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=_kebab, populate_by_name=True)
