"""kernel-matrix: build, test and publish a PyTorch kernel for every torch x CUDA variant.

The package reads top-down, each group using only the groups above it:

- ``config``: the configuration files (build_matrix.yaml, build.toml) and their schemas,
  read within limits, every value with its ``file:line:col``.
- ``planning``: what to build: the matrix's cells, variant names, CUDA capabilities,
  the toolchain a native build would use, how much to run at once.
- ``building``: building one variant natively (compiler commands, the object cache,
  pinned C++ dependencies) and laying it out as the variant directory users load.
- ``checking``: checks of a built variant: ABI rules and the kernel's own tests.
- ``containers``: the same build in builder containers, one per cell, through the
  container engine.
- ``releasing``: what leaves the machine: release contents, wheels, the kernel card,
  publishing to the Hub and verifying a release, and cleaning the project.
- ``adopting``: what ``kernel-matrix init`` sets up in a kernel's repository: the kernels
  found, the commit of kernel-matrix its workflows pin (checked on GitHub), where the
  matrix's jobs run, and the files it writes from templates.
- ``running``: the only group that composes a plan, its build and its checks: a native
  build (``kernel-matrix build`` and the build container's worker alike), the selected
  cells of ``build --profile`` (in containers, or natively for Python-only kernels),
  verify's rebuild, and a test job (``test-variant``).
- ``cli``: the ``kernel-matrix`` command, which only parses options and calls the above.

``errors`` (exit codes), ``layout`` (where things go under --build-dir) and ``data`` (the
version tables and defaults) serve all of them, and import none.
"""

from pathlib import Path

__version__ = "0.2.1.dev0"

# The installed package's folder: its data files, templates, headers and Dockerfile,
# and what builder containers mount to run the same code.
PACKAGE_DIR = Path(__file__).resolve().parent
