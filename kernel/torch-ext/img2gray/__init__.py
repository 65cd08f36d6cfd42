"""img2gray: RGB uint8 images [..., H, W, 3] to grayscale uint8 [..., H, W].

gray = trunc((0.21 * r + 0.72 * g) + 0.07 * b), evaluated in float32 left to
right without fused multiply-add (csrc/img2gray_pixel.h is the definition).
"""

from typing import Optional

import torch

from ._ops import add_op_namespace_prefix, ops

__all__ = ["img2gray"]


# The ops as OpOverloads, looked up once: calling an OpOverloadPacket
# (ops.img2gray) resolves the overload on every call. torch.compile traces
# calls to these like any other op.
_img2gray_into = ops.img2gray.default
_to_gray = ops.to_gray.default


def img2gray(input: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Convert RGB ``uint8 [..., H, W, 3]`` to gray ``uint8 [..., H, W]``.

    Runs on the input's device and on that device's current CUDA stream.
    ``out``, if given, receives the result (it may be non-contiguous) and is returned.
    """
    # Nothing besides the op call on the hot path: the ops check their
    # arguments in C++ (same errors and messages as the fake implementations
    # below), and to_gray allocates the output there (torch.empty from Python
    # cost more host time than the rest of the call).
    if out is None:
        return _to_gray(input)
    _img2gray_into(input, out)
    return out


# Mirror check_input() and check_arguments() in torch_binding.cpp: same checks, same wording,
# so a traced program fails exactly like an eager one.
def _check_input(input: torch.Tensor) -> None:
    if input.dtype != torch.uint8:
        raise TypeError(f"img2gray: expected input of dtype torch.uint8, got {input.dtype}")
    if input.dim() < 3:
        raise ValueError(f"img2gray: expected input of shape [..., H, W, 3], got {list(input.shape)}")
    if input.shape[-1] != 3:
        raise ValueError(
            "img2gray: expected 3 channels (RGB) in the last dimension of input "
            f"[..., H, W, 3], got {input.shape[-1]} in shape {list(input.shape)}"
        )


def _check_arguments(input: torch.Tensor, output: torch.Tensor) -> None:
    _check_input(input)
    if output.dtype != torch.uint8:
        raise TypeError(f"img2gray: expected output of dtype torch.uint8, got {output.dtype}")
    expected = list(input.shape[:-1])
    if list(output.shape) != expected:
        raise ValueError(
            f"img2gray: expected output of shape {expected} for input of shape "
            f"{list(input.shape)}, got {list(output.shape)}"
        )
    if input.device != output.device:
        raise RuntimeError(
            "img2gray: expected input and output on the same device, got input on "
            f"{input.device} and output on {output.device}"
        )


@torch.library.register_fake(add_op_namespace_prefix("img2gray"))
def _img2gray_fake(input: torch.Tensor, output: torch.Tensor) -> None:
    # The op only writes into output, so shape propagation is the check itself.
    _check_arguments(input, output)


@torch.library.register_fake(add_op_namespace_prefix("to_gray"))
def _to_gray_fake(input: torch.Tensor) -> torch.Tensor:
    _check_input(input)
    return input.new_empty(input.shape[:-1])
