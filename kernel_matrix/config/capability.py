"""The CUDA capability format, defined once for every place that reads one:
build.toml's cuda-capabilities, build_matrix.yaml's capability tables,
--cuda-capabilities, and a released variant's metadata.json (verify)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field

# A GPU generation, major.minor: 9.0 is sm_90.
_TARGET = r"\d+\.\d+"
# kernel-builder's suffixes for code that runs on that architecture only (9.0a)
# or on its family (10.0f).
_SPECIFIC = r"[af]?"
# kernel-builder's suffix for "embed this capability's PTX too", for later GPUs
# to JIT (9.0+PTX). build.toml writes it; a list of targets never does.
PTX_SUFFIX = "+PTX"

# A capability as --cuda-capabilities and metadata.json's archs (less +PTX) hold
# it: 9.0, 9.0a, 10.0f. \Z, not $: $ also matches before a final newline.
CAPABILITY = re.compile(rf"^{_TARGET}{_SPECIFIC}\Z", re.ASCII)

# The pydantic types. Their patterns run in pydantic's Rust regex engine, where
# $ is the end of the text (and \Z does not exist).
# build.toml's: any capability, "+PTX" included.
Capability = Annotated[str, Field(pattern=rf"^{_TARGET}{_SPECIFIC}({re.escape(PTX_SUFFIX)})?$")]
# build_matrix.yaml's default tables: plain targets, which nvcc's range
# (cuda_toolkits.yaml) and a section's cuda-capabilities are compared with.
TargetCapability = Annotated[str, Field(pattern=rf"^{_TARGET}$")]
