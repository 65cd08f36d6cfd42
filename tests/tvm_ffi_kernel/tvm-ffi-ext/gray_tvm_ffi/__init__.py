"""gray-tvm-ffi: RGB uint8 [..., 3] to gray uint8 [...], on any DLPack tensor."""

import tvm_ffi

from ._ops import ops

__all__ = ["img2gray"]


def img2gray(rgb, out):
    """Write the gray image of rgb into out (same device, contiguous) and return out."""
    ops.img2gray(tvm_ffi.from_dlpack(rgb), tvm_ffi.from_dlpack(out))
    return out
