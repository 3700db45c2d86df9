"""`dasllama mtmd`'s bad input: one sentence each, non-zero exit, nothing on stdout."""
import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli
from tests import assets, gguf_factory, mtmd_pairs


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return mtmd_pairs.write_pair(tmp_path_factory.mktemp("mtmd"), "gemma3", "tiny")


def run(*args):
    return CliRunner().invoke(cli, ["mtmd", *map(str, args)])


def test_image_without_mmproj_is_a_usage_error(pair):
    r = run("-m", pair[0], "--image", "x.jpg", "-p", "hi")
    assert r.exit_code == 2 and "--image needs --mmproj" in r.output


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
