import re

import pytest
import torch
from reference import all_rgb_triples, img2gray_reference


def random_rgb(*shape: int, device: str = "cpu", seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (*shape, 3), dtype=torch.uint8, generator=generator).to(device)


def expected(rgb: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(img2gray_reference(rgb.cpu().numpy()))


def assert_bit_exact(got: torch.Tensor, rgb: torch.Tensor) -> None:
    want = expected(rgb)
    got = got.cpu()
    assert got.dtype == torch.uint8 and got.shape == want.shape
    wrong = (got != want).nonzero()
    if len(wrong):
        where = tuple(wrong[0].tolist())
        pytest.fail(
            f"{len(wrong)} pixels differ; first at {where}: rgb={rgb.cpu()[where].tolist()} "
            f"got {int(got[where])}, want {int(want[where])}"
        )


def test_every_rgb_triple_matches_the_reference_bit_for_bit(img2gray, device):
    rgb = torch.from_numpy(all_rgb_triples()).to(device)
    out = torch.full(rgb.shape[:-1], 0xA5, dtype=torch.uint8, device=device)  # poison: every pixel must be written
    img2gray.img2gray(rgb, out=out)
    assert_bit_exact(out, rgb)


def test_gray_pixels_keep_their_value(img2gray, device):
    v = torch.arange(256, dtype=torch.uint8, device=device)
    rgb = v[:, None, None].expand(256, 1, 3).contiguous()
    assert img2gray.img2gray(rgb).flatten().tolist() == list(range(256))


@pytest.mark.parametrize("shape", [(1, 1), (7, 13), (37, 41), (480, 640), (2, 3, 17, 19), (2, 1, 2, 5, 4), (3, 33, 65)])
def test_images_and_leading_batch_dimensions(img2gray, device, shape):
    rgb = random_rgb(*shape, device=device, seed=sum(shape))
    out = img2gray.img2gray(rgb)
    assert out.device == rgb.device
    assert_bit_exact(out, rgb)


def test_out_form_writes_into_and_returns_out(img2gray, device):
    rgb = random_rgb(31, 47, device=device)
    out = torch.empty(31, 47, dtype=torch.uint8, device=device)
    result = img2gray.img2gray(rgb, out=out)
    assert result is out
    assert_bit_exact(out, rgb)


@pytest.mark.parametrize("view", ["sliced", "transposed", "planar-permuted", "expanded"])
def test_non_contiguous_inputs(img2gray, device, view):
    base = random_rgb(64, 96, device=device, seed=3)
    rgb = {
        "sliced": base[5:50:3, ::2],
        "transposed": base.transpose(0, 1),
        "planar-permuted": base.permute(2, 0, 1).contiguous().permute(1, 2, 0),  # CHW memory, HWC view
        "expanded": base[:1].expand(20, 96, 3),
    }[view]
    assert not rgb.is_contiguous()
    assert_bit_exact(img2gray.img2gray(rgb), rgb)


@pytest.mark.parametrize("in_offset, out_offset", [(3, 0), (0, 1), (5, 7)])
def test_views_that_start_mid_allocation(img2gray, device, in_offset, out_offset):
    # Contiguous views whose data pointers are not 16-byte aligned (the fast
    # CUDA path needs alignment; these take the general one).
    h, w = 67, 131
    rgb_storage = random_rgb(h * w + 8, 1, device=device, seed=11).flatten()
    rgb = rgb_storage[in_offset : in_offset + h * w * 3].view(h, w, 3)
    out = torch.zeros(h * w + 8, dtype=torch.uint8, device=device)[out_offset : out_offset + h * w].view(h, w)
    assert rgb.is_contiguous() and out.is_contiguous()
    assert img2gray.img2gray(rgb, out=out) is out
    assert_bit_exact(out, rgb)


def test_non_contiguous_out(img2gray, device):
    rgb = random_rgb(40, 24, device=device, seed=4)
    out = torch.zeros(24, 40, dtype=torch.uint8, device=device).t()
    assert not out.is_contiguous()
    assert img2gray.img2gray(rgb, out=out) is out
    assert_bit_exact(out, rgb)


@pytest.mark.parametrize("shape", [(0, 5, 3), (4, 0, 3), (0, 0, 3), (2, 0, 7, 3)])
def test_empty_tensors(img2gray, device, shape):
    rgb = torch.empty(shape, dtype=torch.uint8, device=device)
    out = img2gray.img2gray(rgb)
    assert out.shape == shape[:-1] and out.dtype == torch.uint8 and out.device == rgb.device


def test_large_image_is_converted_completely(img2gray, device):
    rgb = random_rgb(1080, 1920, device=device, seed=5)
    assert_bit_exact(img2gray.img2gray(rgb), rgb)


# Each bad call raises ONE error whose message names what was expected, both
# through the Python wrapper and when the op is called directly.
BAD_INPUTS = [
    (
        "dtype",
        lambda d: torch.zeros(4, 4, 3, dtype=torch.float32, device=d),
        TypeError,
        "expected input of dtype torch.uint8",
    ),
    (
        "rank",
        lambda d: torch.zeros(4, 3, dtype=torch.uint8, device=d),
        ValueError,
        "expected input of shape [..., H, W, 3]",
    ),
    ("channels", lambda d: torch.zeros(4, 4, 4, dtype=torch.uint8, device=d), ValueError, "expected 3 channels (RGB)"),
]


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_inputs_raise_a_clear_error(img2gray, device, case):
    _, make, error, message = case
    rgb = make(device)
    with pytest.raises(error, match=re.escape(message)):
        img2gray.img2gray(rgb)
    out = torch.empty(rgb.shape[:-1], dtype=torch.uint8, device=device)
    with pytest.raises(error, match=re.escape(message)):
        img2gray.ops.img2gray(rgb, out)


@pytest.mark.parametrize(
    "out_shape, out_dtype, error, message",
    [
        ((4, 5), torch.uint8, ValueError, "expected output of shape [4, 6] for input of shape [4, 6, 3], got [4, 5]"),
        ((4, 6), torch.int32, TypeError, "expected output of dtype torch.uint8, got"),
    ],
)
def test_bad_outputs_raise_a_clear_error(img2gray, device, out_shape, out_dtype, error, message):
    rgb = random_rgb(4, 6, device=device)
    out = torch.empty(out_shape, dtype=out_dtype, device=device)
    with pytest.raises(error, match=re.escape(message)):
        img2gray.img2gray(rgb, out=out)


def test_output_overlapping_the_input_is_rejected(img2gray, device):
    storage = torch.zeros(4 * 4 * 3, dtype=torch.uint8, device=device)
    rgb = storage.view(4, 4, 3)
    out = storage[:16].view(4, 4)
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        img2gray.img2gray(rgb, out=out)


@pytest.mark.cuda
def test_device_mix_is_rejected(img2gray, cuda_device):
    rgb = random_rgb(4, 4, device="cuda")
    for inp, out in [
        (rgb, torch.empty(4, 4, dtype=torch.uint8)),
        (rgb.cpu(), torch.empty(4, 4, dtype=torch.uint8, device="cuda")),
    ]:
        with pytest.raises(RuntimeError, match="expected input and output on the same device"):
            img2gray.img2gray(inp, out=out)


def test_opcheck(img2gray, device):
    rgb = random_rgb(9, 11, device=device)
    out = torch.empty(9, 11, dtype=torch.uint8, device=device)
    torch.library.opcheck(img2gray.ops.img2gray.default, (rgb, out))


def test_fake_tensors_propagate_shapes_and_errors(img2gray):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        rgb = torch.empty(2, 5, 7, 3, dtype=torch.uint8)
        assert img2gray.img2gray(rgb).shape == (2, 5, 7)
        with pytest.raises(ValueError, match=r"expected 3 channels \(RGB\)"):
            img2gray.img2gray(torch.empty(5, 7, 4, dtype=torch.uint8))


def test_torch_compile_traces_without_graph_breaks(img2gray, device):
    torch._dynamo.reset()

    def brighten_and_gray(rgb: torch.Tensor) -> torch.Tensor:
        return img2gray.img2gray(rgb.flip(-2)).to(torch.int32) + 1

    # fullgraph: a graph break raises. aot_eager: Dynamo's and AOTAutograd's tracing, which is
    # what the op's registration (schema, fake kernel) has to support; Inductor's code for the
    # ops around it is torch's own, and compiling it costs ~15 s of C++ per run on 2 cores.
    compiled = torch.compile(brighten_and_gray, fullgraph=True, backend="aot_eager")
    rgb = random_rgb(16, 24, device=device, seed=7)
    torch.testing.assert_close(compiled(rgb), brighten_and_gray(rgb), rtol=0, atol=0)


@pytest.mark.cuda
def test_runs_on_the_current_stream(img2gray, cuda_device):
    rgb = random_rgb(2048, 2048, device="cuda", seed=8)
    out = torch.zeros(2048, 2048, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(500_000_000)  # hold the side stream for a while
        img2gray.img2gray(rgb, out=out)
    # The default stream does not wait for the (non-blocking) side stream, so a
    # kernel launched on the side stream has not run yet...
    torch.cuda.default_stream().synchronize()
    assert int(out.cpu().count_nonzero()) == 0, "img2gray ran on the default stream, not the current one"
    side.synchronize()
    assert_bit_exact(out, rgb)


@pytest.mark.cuda
@pytest.mark.multi_gpu
def test_runs_on_the_input_device_not_the_current_one(img2gray, cuda_device):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    rgb = random_rgb(300, 200, device="cuda:1", seed=9)
    with torch.cuda.device(0):
        out = img2gray.img2gray(rgb)
        assert torch.cuda.current_device() == 0
    assert out.device == torch.device("cuda:1")
    assert_bit_exact(out, rgb)


def test_the_variant_registers_a_kernel_for_its_backend(img2gray, variant_backend):
    # Checked through the dispatcher, so it holds on machines without a GPU.
    op = img2gray.add_op_namespace_prefix("img2gray")
    expected = {"cpu": {"CPU"}, "cuda": {"CPU", "CUDA"}}[variant_backend]
    registered = {key for key in ("CPU", "CUDA") if torch._C._dispatch_has_kernel_for_dispatch_key(op, key)}
    assert registered == expected
