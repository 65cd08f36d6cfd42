"""The numpy reference for img2gray's arithmetic (csrc/img2gray_pixel.h):
float32 products and sums, left to right, no fused multiply-add, truncation."""

import numpy as np

WEIGHTS = (np.float32(0.21), np.float32(0.72), np.float32(0.07))


def img2gray_reference(rgb: np.ndarray) -> np.ndarray:
    assert rgb.dtype == np.uint8 and rgb.shape[-1] == 3
    r, g, b = (rgb[..., i].astype(np.float32) for i in range(3))
    # numpy rounds every operation to float32 and never contracts into FMA.
    gray = (WEIGHTS[0] * r + WEIGHTS[1] * g) + WEIGHTS[2] * b
    return gray.astype(np.uint8)  # float -> uint8 truncates toward zero


def all_rgb_triples() -> np.ndarray:
    """Every one of the 2^24 RGB triples, as a 4096 x 4096 image."""
    code = np.arange(1 << 24, dtype=np.uint32)
    rgb = np.stack([(code >> 16) & 0xFF, (code >> 8) & 0xFF, code & 0xFF], axis=-1).astype(np.uint8)
    return rgb.reshape(4096, 4096, 3)
