"""`dasllama mtmd` against llama-mtmd-cli, and its bad input: one sentence each, non-zero exit,
nothing on stdout."""
import gguf
import pytest
from click.testing import CliRunner
from PIL import Image

from dasllama.core.tools.ref_mtmd import mtmd_cli_text
from dasllama_cli.main import cli
from tests import assets, gguf_factory, mtmd_pairs


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return mtmd_pairs.write_pair(tmp_path_factory.mktemp("mtmd"), "gemma3", "tiny")


@pytest.fixture(scope="module")
def idefics3_pair(tmp_path_factory):
    """Seed 2: of seeds 0-3 the first whose 24 greedy tokens from llama-mtmd-cli are not one
    token repeated (on test-1.jpeg), so the test checks every step of the reply, not just its
    first."""
    return mtmd_pairs.write_pair(tmp_path_factory.mktemp("mtmd"), "idefics3", "tiny", seed=2)


def assert_greedy_as_llama_mtmd_cli(pair, images, prompt, n_predict=24):
    """Our `mtmd` turn's greedy text is llama-mtmd-cli's on the same pair, images and prompt."""
    ref, _ = mtmd_cli_text(pair[0], pair[1], images, prompt, n_predict, 2)
    args = [arg for image in images for arg in ("--image", image)]
    r = run("-m", pair[0], "--mmproj", pair[1], *args, "-p", prompt, "-n", n_predict, "--temp", 0, "-t", 2)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == ref.strip()


def run(*args):
    return CliRunner().invoke(cli, ["mtmd", *map(str, args)])


def test_image_without_mmproj_is_a_usage_error(pair):
    r = run("-m", pair[0], "--image", "x.jpg", "-p", "hi")
    assert r.exit_code == 2 and "--image and --audio need --mmproj" in r.output


def test_not_an_image(pair, tmp_path):
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"plain text")
    r = run("-m", pair[0], "--mmproj", pair[1], "--image", junk, "-p", "hi")
    assert r.exit_code == 1 and "not an image" in r.output and "Traceback" not in r.output


def test_truncated_jpeg(pair, tmp_path):
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg").read_bytes()
    cut = tmp_path / "cut.jpeg"
    cut.write_bytes(jpeg[:len(jpeg) // 2])
    r = run("-m", pair[0], "--mmproj", pair[1], "--image", cut, "-p", "hi")
    assert r.exit_code == 1 and "damaged image" in r.output


def test_width_mismatch(pair, tmp_path):
    wide = gguf_factory.write_model(tmp_path, "gemma3", "F32", n_embd=256, n_layer=1)
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    r = run("-m", wide, "--mmproj", pair[1], "--image", jpeg, "-p", "hi")
    assert r.exit_code == 1 and "128 wide" in r.output and "256 wide" in r.output


def test_mmproj_that_is_a_text_model(pair):
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    r = run("-m", pair[0], "--mmproj", pair[0], "--image", jpeg, "-p", "hi")
    assert r.exit_code == 1 and "not an mmproj file" in r.output


def _clip_header(path, projector):
    """An mmproj's header with the vision keys but no tensors: enough to be refused on its keys."""
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_clip_has_vision_encoder(True)
    if projector:
        w.add_clip_projector_type(projector)
    w.add_vision_projection_dim(128)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return path


def test_mmproj_without_projector_type(pair, tmp_path):
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    r = run("-m", pair[0], "--mmproj", _clip_header(tmp_path / "m.gguf", None), "--image", jpeg, "-p", "hi")
    assert r.exit_code == 1 and "no clip.projector_type key" in r.output and "Traceback" not in r.output


def test_unsupported_projector_names_the_supported_ones(pair, tmp_path):
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    r = run("-m", pair[0], "--mmproj", _clip_header(tmp_path / "m.gguf", "ultravox"), "--image", jpeg, "-p", "hi")
    assert r.exit_code == 1 and "'ultravox'" in r.output and "supports gemma3" in r.output


def test_mmproj_for_a_family_without_media(pair, tmp_path):
    """A llama model as wide as the gemma3 mmproj's projection still takes no gemma3 images."""
    llama = gguf_factory.write_model(tmp_path, "llama", "F32", n_embd=128, n_layer=1)
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    r = run("-m", llama, "--mmproj", pair[1], "--image", jpeg, "-p", "hi")
    assert r.exit_code == 1 and "'llama' model" in r.output and "(gemma3)" in r.output
    assert r.stdout == ""


def test_greedy_tokens_match_llama_mtmd_cli(pair):
    """The image turn end to end: our tower's embeddings spliced into the chat template, then
    greedy tokens, against llama-mtmd-cli (its default flash attention, 4096 cells) on the same
    pair, image, prompt and threads. The tower differs from libmtmd by ~3e-4 relative (f16 K/V
    there), so this holds while that difference flips no argmax; 24 tokens of random weights
    are a sharp check of the splice's positions, markers and masks."""
    assets.or_skip(assets.llama_mtmd_bin)
    image = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    prompt = "What is in the picture?"
    assert_greedy_as_llama_mtmd_cli(pair, [image], prompt)


def test_q8_0_greedy_tokens_match_llama_mtmd_cli(tmp_path):
    """The same turn on the pair's weights in Q8_0 (the converter's --outtype q8_0)."""
    assets.or_skip(assets.llama_mtmd_bin)
    image = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    pair = mtmd_pairs.write_pair(tmp_path, "gemma3", "tiny", wtype="Q8_0")
    assert_greedy_as_llama_mtmd_cli(pair, [image], "What is in the picture?")


def test_idefics3_greedy_tokens_match_llama_mtmd_cli(idefics3_pair, tmp_path):
    """An idefics3 (SmolVLM) turn: 2 x 2 tiles and the overview, each after the tokens mtmd puts
    before it (<fake_token_around_image><row_R_col_C>, a newline token between rows, a
    double-newline <fake_token_around_image><global-img> before the overview), the marker in
    the middle of the prompt; greedy tokens against llama-mtmd-cli's. The image goes in as PNG,
    which stb_image and Pillow decode alike (see the qwen2vl test)."""
    assets.or_skip(assets.llama_mtmd_bin)
    image = tmp_path / "test-1.png"
    Image.open(assets.or_skip(assets.mtmd_media, "test-1.jpeg")).convert("RGB").save(image)
    prompt = "Look at <__media__> and say what it shows."
    assert_greedy_as_llama_mtmd_cli(idefics3_pair, [image], prompt)


def test_idefics3_with_a_vocab_lacking_its_image_tokens(idefics3_pair, tmp_path):
    """mtmd looks the double newline up as one token; an SPM vocab (llama-spm) has none."""
    spm = gguf_factory.write_model(tmp_path, "llama", "F32", n_embd=128, n_layer=1)
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    r = run("-m", spm, "--mmproj", idefics3_pair[1], "--image", jpeg, "-p", "hi")
    assert r.exit_code == 1 and "no token '\\n\\n'" in r.output and "Traceback" not in r.output
    assert r.stdout == ""


@pytest.mark.parametrize("projector", ["qwen2vl", "qwen25vl"])
def test_qwen2vl_greedy_tokens_match_llama_mtmd_cli(tmp_path, projector):
    """Two qwen2vl images of different grids (11 x 9 and 5 x 9 merged patches), the markers in
    the middle of the prompt: each image's rows at M-RoPE positions (t, row, column) from its
    first cell's position, the text after it max(rows, columns) on (without M-RoPE the reply
    differs from the 2nd token on); greedy tokens against llama-mtmd-cli's. The images go in as
    PNG: from test-1.jpeg itself, llama-mtmd-cli's stb_image and Pillow decode other pixels, and
    on this prompt that alone flips the 4th token (with libmtmd's own embeddings spliced in
    here too)."""
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = mtmd_pairs.write_pair(tmp_path, projector, "tiny")
    photo = Image.open(assets.or_skip(assets.mtmd_media, "test-1.jpeg")).convert("RGB")
    wide, tall = tmp_path / "wide.png", tmp_path / "tall.png"
    photo.save(wide)
    photo.resize((300, 500)).save(tall)
    prompt = "Compare <__media__> with <__media__> please."
    assert_greedy_as_llama_mtmd_cli((model, mmproj), [wide, tall], prompt)


def test_image_and_audio_in_one_turn_match_llama_mtmd_cli(tmp_path):
    """Qwen2.5-Omni's layout: one mmproj with both towers (qwen2.5o: a qwen2.5vl image tower and
    a qwen2a audio tower) before a qwen2vl text model; a clip, then an image, in command-line
    order (each file's kind read from its bytes, as llama-mtmd-cli reads them): the audio's rows
    at plain positions, the image's by row and column after them, the text after both. Seed 2:
    a pair whose greedy reply changes when the two swap places (" recorded ..." / " dear ...")."""
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = mtmd_pairs.write_pair(tmp_path, "qwen25o", "tiny", seed=2)
    image = tmp_path / "test-1.png"
    Image.open(assets.or_skip(assets.mtmd_media, "test-1.jpeg")).convert("RGB").resize((300, 200)).save(image)
    clip = assets.or_skip(assets.mtmd_media, "test-2.mp3")
    assert_greedy_as_llama_mtmd_cli((model, mmproj), [clip, image], "Hear <__media__> and see <__media__>.")
