"""The gemma3 and idefics3 vision towers against llama.cpp's libmtmd on llama.cpp's own test
image, on tiny random-weight pairs written with the converter's names (tests.mtmd_pairs); and the
mmproj and image inputs that must fail with one sentence."""
import gguf
import numpy as np
import pytest

from dasllama.core.mtmd.mmproj import Mmproj, MmprojError
from PIL import Image

from dasllama.core.mtmd import preprocess
from dasllama.core.mtmd.preprocess import gemma3_input, idefics3_tiles, qwen2vl_input
from dasllama.core.mtmd.qwen2vl import Qwen25VLTower, Qwen2VLTower
from dasllama.core.mtmd.siglip import Gemma3Tower, Idefics3Tower
from dasllama.core.tools.ref_mtmd import mtmd_embeddings
from dasllama.formats.image import ImageError, open_rgb
from dasllama.kernels.vision import (avg_pool_tokens, avg_pool_tokens_ref, bias_gelu_f16, bias_gelu_f16_ref,
                                    bias_gelu_quick, bias_gelu_quick_ref, rms_norm_rows, rms_norm_rows_ref,
                                    round_rows_f16)
from tests import assets, mtmd_pairs

# libmtmd runs flash attention with f16 K/V and ggml's f16 GELU table, and so do we; what is
# left is summation order (layer norms, softmax) that turns some activations to the other f16
# neighbour before an F16 product. Measured 2.4e-4 on this pair (2.6e-4 with f32 K/V and GELU;
# llama.cpp 0c1e570).
MAX_REL_ERR = 2e-3

# The same pair written as the converter's --outtype q8_0 writes it (Q8_0 matrices, its F16
# input projection): both engines quantise each activation row to Q8_0 and take exact int8
# dots, so the same small differences now move an activation by a Q8_0 step (1/127 of its
# block's largest) where they moved it by an f16 one: measured 2.0e-3, against 8.5e-3 between
# libmtmd's Q8_0 and F16 embeddings of the same weights (llama.cpp 0c1e570).
Q8_0_MAX_REL_ERR = 5e-3


# idefics3, the same kernels and the same two differences: measured 5.5e-4 on test-1.jpeg (2 x 2
# tiles + overview) and 5.4e-4 on its tall strip (llama.cpp 0c1e570); Pillow's own resize (see
# preprocess) gave 3.3e-3 on the strip, a bicubic one 2.8e-2 on the whole image.
IDEFICS3_MAX_REL_ERR = 2e-3


# qwen2vl's tower, the same kernels and libmtmd's same f16 K/V and f16 GELU tables: measured
# 4.7e-4 on test-1.jpeg and 7.4e-4 on a 50 x 40 image scaled up to its minimum of 8 tokens
# (llama.cpp 0c1e570); without the 2D rotary embedding it is 1.2e-1. qwen25vl's: 4.0e-4 and
# 7.7e-4 (llama.cpp of llama-cpp-python 0.3.36).
QWEN2VL_MAX_REL_ERR = 2e-3


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return mtmd_pairs.write_pair(tmp_path_factory.mktemp("mtmd"), "gemma3", "tiny")


@pytest.fixture(scope="module")
def idefics3_pair(tmp_path_factory):
    return mtmd_pairs.write_pair(tmp_path_factory.mktemp("mtmd"), "idefics3", "tiny")


def test_tower_embeddings_match_libmtmd(pair, tmp_path):
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = pair
    img = open_rgb(assets.or_skip(assets.mtmd_media, "test-1.jpeg"))
    mm = Mmproj(mmproj)
    ours = Gemma3Tower(mm, 2).encode(gemma3_input(img, mm.hparams))
    ref, _ = mtmd_embeddings(model, mmproj, np.asarray(img), 2, tmp_path)
    assert ours.shape == ref.shape == (mm.hparams.n_tokens, mm.hparams.n_embd_text)
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    assert rel < MAX_REL_ERR, f"relative error {rel:.2e} against libmtmd"


def test_q8_0_tower_embeddings_match_libmtmd(tmp_path_factory, tmp_path):
    """A Q8_0 mmproj's matrices multiply through the LLM's Q8_0 batch kernels (16-row copies)."""
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = mtmd_pairs.write_pair(tmp_path_factory.getbasetemp() / "q8", "gemma3", "tiny", wtype="Q8_0")
    img = open_rgb(assets.or_skip(assets.mtmd_media, "test-1.jpeg"))
    mm = Mmproj(mmproj)
    assert mm.matrix("v.blk.0.ffn_up.weight")[0] == gguf.GGMLQuantizationType.Q8_0
    ours = Gemma3Tower(mm, 2).encode(gemma3_input(img, mm.hparams))
    ref, _ = mtmd_embeddings(model, mmproj, np.asarray(img), 2, tmp_path)
    assert ours.shape == ref.shape == (mm.hparams.n_tokens, mm.hparams.n_embd_text)
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    assert rel < Q8_0_MAX_REL_ERR, f"relative error {rel:.2e} against libmtmd"


@pytest.mark.parametrize("crop", [None, (0, 0, 201, 488)], ids=["wide-2x2", "tall-strip-1x2"])
def test_idefics3_tower_embeddings_match_libmtmd(idefics3_pair, tmp_path, crop):
    """Every tile and the overview, in mtmd's chunk order (tiles row by row, then the overview);
    the tall strip takes the other branch of the longest-edge resize and shrinks both ways,
    where Pillow and mtmd's resampler part."""
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = idefics3_pair
    img = open_rgb(assets.or_skip(assets.mtmd_media, "test-1.jpeg"))
    img = img.crop(crop) if crop else img
    mm = Mmproj(mmproj)
    cut = idefics3_tiles(img, mm.hparams)
    tower = Idefics3Tower(mm, 2)
    ours = np.concatenate([tower.encode(t) for t in [*cut.tiles, cut.overview]])
    ref, _ = mtmd_embeddings(model, mmproj, np.asarray(img), 2, tmp_path)
    assert (cut.grid_x, cut.grid_y) == ((1, 2) if crop else (2, 2))
    assert ours.shape == ref.shape == ((cut.grid_x * cut.grid_y + 1) * mm.hparams.n_tokens, mm.hparams.n_embd_text)
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    assert rel < IDEFICS3_MAX_REL_ERR, f"relative error {rel:.2e} against libmtmd"


@pytest.mark.parametrize("projector", ["qwen2vl", "qwen25vl"])
@pytest.mark.parametrize("size, n_tokens", [(None, 99), ((50, 40), 12)], ids=["test-1.jpeg", "small-50x40"])
def test_qwen2vl_tower_embeddings_match_libmtmd(tmp_path_factory, tmp_path, projector, size, n_tokens):
    """mtmd's sizing (sides to whole 2 x 2 merges of 28 px patches, at least 8 tokens), the
    bicubic letterbox, the two-frame patch conv, 2D M-RoPE and the merger; for qwen25vl also
    the RMS norms, the gated MLP and the first layer's window attention (11 x 9 squares in
    windows of 2 x 2, ragged at the right and bottom: attending to the whole image instead
    gives 3.9e-1)."""
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = mtmd_pairs.write_pair(tmp_path_factory.getbasetemp() / projector, projector, "tiny")
    img = open_rgb(assets.or_skip(assets.mtmd_media, "test-1.jpeg"))
    img = img.resize(size) if size else img
    mm = Mmproj(mmproj)
    tower = {"qwen2vl": Qwen2VLTower, "qwen25vl": Qwen25VLTower}[projector]
    ours = tower(mm, 2).encode(qwen2vl_input(img, mm.hparams))
    ref, _ = mtmd_embeddings(model, mmproj, np.asarray(img), 2, tmp_path)
    assert ours.shape == ref.shape == (n_tokens, mm.hparams.n_embd_text)
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    assert rel < QWEN2VL_MAX_REL_ERR, f"relative error {rel:.2e} against libmtmd"


def test_gelu_f16_table_kernel_matches_reference():
    """ggml's f16 GELU table, computed: equal to the f64 reference rounded the same way, but
    where the f32 tanh and the f64 one round to neighbouring f16 values (one f16 step apart)."""
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 5.0, (64, 256)).astype(np.float32)
    bias = rng.normal(0.0, 0.5, 256).astype(np.float32)
    ref = bias_gelu_f16_ref(x, bias)
    bias_gelu_f16(x, bias)
    assert np.mean(x == ref) > 0.999
    np.testing.assert_allclose(x, ref, rtol=1e-3, atol=6e-8)
    assert np.all(x[ref == 0] == 0)


def test_f16_rounding_kernel_is_numpys():
    x = np.random.default_rng(1).normal(0.0, 3.0, (16, 300)).astype(np.float32)
    x[0, :4] = (1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 70000.0, 1e-8)    # two ties, overflow, subnormal
    ref = x.astype(np.float16).astype(np.float32)
    round_rows_f16(x)
    np.testing.assert_array_equal(x, ref)


def test_gelu_quick_kernel_matches_reference():
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 4.0, (8, 40)).astype(np.float32)
    bias = rng.normal(0.0, 0.5, 40).astype(np.float32)
    ref = bias_gelu_quick_ref(x, bias)
    bias_gelu_quick(x, bias)
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [(97, 64), (900, 700)], ids=["shrink", "grow"])
@pytest.mark.parametrize("name, kernel, support, pillow", [
    ("bilinear", preprocess._bilinear_filter, 1.0, Image.BILINEAR),
    ("bicubic", preprocess._bicubic_filter, 2.0, Image.BICUBIC),
    ("lanczos", preprocess._lanczos_filter, 3.0, Image.LANCZOS)])
def test_resample_is_pillows_where_pillow_filters_rows_first(size, name, kernel, support, pillow):
    """Weights, fixed point and rounding as Pillow's, on a wide image (Pillow filters its rows
    first there, as mtmd always does): every pixel equal."""
    pixels = np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    ours = preprocess.resample(pixels, size, kernel, support)
    np.testing.assert_array_equal(ours, np.asarray(Image.fromarray(pixels).resize(size, pillow)))


def test_idefics3_mmproj_without_longest_edge_is_one_sentence(tmp_path, idefics3_pair):
    with pytest.raises(MmprojError, match="without clip.vision.preproc_image_size"):
        Mmproj(_mmproj_without(tmp_path, idefics3_pair, drop_key="clip.vision.preproc_image_size"))


def test_pool_and_norm_kernels_match_references():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 24), dtype=np.float32)
    pooled = np.empty((16, 24), np.float32)
    avg_pool_tokens(x, 8, 2, pooled)
    np.testing.assert_allclose(pooled, avg_pool_tokens_ref(x, 8, 2), rtol=1e-5, atol=1e-6)
    w = rng.uniform(0.5, 1.5, 24).astype(np.float32)
    normed = np.empty_like(x)
    rms_norm_rows(x, w, 1e-6, normed)
    np.testing.assert_allclose(normed, rms_norm_rows_ref(x, w, 1e-6), rtol=1e-5, atol=1e-6)


def _mmproj_without(tmp_path, pair, drop_key=None, projector=None):
    """A copy of the pair's mmproj with one key left out or the projector type replaced."""
    src = gguf.GGUFReader(pair[1])
    out = tmp_path / "edited.gguf"
    w = gguf.GGUFWriter(str(out), "clip")
    for field in src.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", drop_key):
            continue
        value = field.contents()
        if field.name == "clip.projector_type" and projector:
            value = projector
        sub = field.types[1] if len(field.types) > 1 else None
        w.add_key_value(field.name, value, field.types[0], sub_type=sub)
    for t in src.tensors[:1]:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def test_mmproj_without_projector_type_is_one_sentence(tmp_path, pair):
    with pytest.raises(MmprojError, match="not an mmproj file"):
        Mmproj(_mmproj_without(tmp_path, pair, drop_key="clip.projector_type"))


def test_unsupported_projector_names_the_supported_ones(tmp_path, pair):
    with pytest.raises(MmprojError, match=r"supports gemma3 \(image\), idefics3 \(image\)"):
        Mmproj(_mmproj_without(tmp_path, pair, projector="qwen2vl"))


def test_a_text_model_is_not_an_mmproj(pair):
    with pytest.raises(MmprojError, match="not an mmproj file"):
        Mmproj(pair[0])


def test_bad_images_are_one_sentence(tmp_path):
    junk = tmp_path / "junk.jpg"
    junk.write_bytes(b"this is not an image")
    with pytest.raises(ImageError, match="not an image"):
        open_rgb(junk)
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg").read_bytes()
    cut = tmp_path / "cut.jpeg"
    cut.write_bytes(jpeg[:len(jpeg) // 3])
    with pytest.raises(ImageError, match="damaged"):
        open_rgb(cut)
