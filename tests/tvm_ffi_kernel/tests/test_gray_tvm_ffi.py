# The kernel's own suite, run by `kernel-matrix test` against a built variant.
import gray_tvm_ffi
import numpy as np
import pytest
import torch

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def reference(rgb: np.ndarray) -> np.ndarray:
    """csrc/img2gray_pixel.h's formula, in float32, left to right."""
    r, g, b = (rgb[..., i].astype(np.float32) for i in range(3))
    return ((np.float32(0.21) * r + np.float32(0.72) * g) + np.float32(0.07) * b).astype(np.uint8)


@pytest.mark.kernels_ci
@pytest.mark.parametrize("device", DEVICES)
def test_img2gray(device):
    rgb = torch.randint(0, 256, (17, 33, 3), dtype=torch.uint8, device=device)
    out = torch.empty((17, 33), dtype=torch.uint8, device=device)
    assert gray_tvm_ffi.img2gray(rgb, out) is out
    np.testing.assert_array_equal(out.cpu().numpy(), reference(rgb.cpu().numpy()))


@pytest.mark.kernels_ci
def test_numpy_input():
    rgb = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)
    out = np.zeros((5, 7), dtype=np.uint8)
    gray_tvm_ffi.img2gray(rgb, out)
    np.testing.assert_array_equal(out, reference(rgb))


@pytest.mark.kernels_ci
def test_refuses_wrong_dtype():
    with pytest.raises(TypeError, match="uint8"):
        gray_tvm_ffi.img2gray(torch.zeros(4, 3), torch.zeros(4, dtype=torch.uint8))
