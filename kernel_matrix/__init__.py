"""kernel-matrix: build, test and publish a PyTorch kernel for every torch x CUDA variant."""

__version__ = "0.1.0"
