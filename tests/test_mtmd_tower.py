"""The gemma3 vision tower against llama.cpp's libmtmd on llama.cpp's own test image, on a tiny
random-weight pair written with the converter's names (tests.mtmd_pairs); and the mmproj and
image inputs that must fail with one sentence."""
import gguf
import numpy as np
import pytest

from dasllama.core.mtmd.mmproj import Mmproj, MmprojError
from dasllama.core.mtmd.preprocess import gemma3_input
from dasllama.core.mtmd.siglip import Gemma3Tower
from dasllama.core.tools.ref_mtmd import mtmd_embeddings
from dasllama.formats.image import ImageError, open_rgb
from dasllama.kernels.vision import avg_pool_tokens, avg_pool_tokens_ref, rms_norm_rows, rms_norm_rows_ref
from tests import assets, mtmd_pairs

# libmtmd runs flash attention with f16 K/V and ggml's f16 GELU table; we keep both in f32.
# Measured 2.6e-4 on this pair (llama.cpp 0c1e570).
MAX_REL_ERR = 2e-3


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return mtmd_pairs.write_pair(tmp_path_factory.mktemp("mtmd"), "gemma3", "tiny")


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
    with pytest.raises(MmprojError, match="supports gemma3"):
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
