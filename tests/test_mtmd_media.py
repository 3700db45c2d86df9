"""A turn's media as llama-mtmd-cli takes them: --image and --audio are one list in the order
given, each file's kind read from its first bytes, comma-separated values split."""
import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from dasllama.core.mtmd.media import is_audio_file, load_media, split_paths
from dasllama.core.mtmd.turn import Audio
from dasllama_cli.main import cli
from tests import assets, mtmd_pairs


def test_kinds_are_read_from_the_files(tmp_path):
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    mp3 = assets.or_skip(assets.mtmd_media, "test-2.mp3")
    wav, flac = tmp_path / "a.wav", tmp_path / "a.flac"
    tone = np.sin(np.arange(8000, dtype=np.float32) / 10)
    soundfile.write(wav, tone, 16000, subtype="PCM_16")
    soundfile.write(flac, tone, 16000)
    for path, audio in ((jpeg, False), (mp3, True), (wav, True), (flac, True)):
        assert is_audio_file(path.read_bytes()[:12]) is audio, path
    kinds = [isinstance(item, Audio) for _, item in load_media([str(wav), str(jpeg), str(mp3)])]
    assert kinds == [True, False, True]
    assert not is_audio_file(b"RIFF")                     # shorter than the check's 12 bytes


def test_comma_separated_values_are_several_files(tmp_path):
    odd = tmp_path / "a,b.png"
    odd.write_bytes(b"x")
    assert split_paths(["x.jpg,y.wav", str(odd), "z.png"]) == ["x.jpg", "y.wav", str(odd), "z.png"]


@pytest.mark.slow
def test_audio_flag_with_an_image_is_the_image_turn(tmp_path):
    """As in llama-mtmd-cli, the flag does not decide the kind: --audio IMAGE is an image."""
    model, mmproj = mtmd_pairs.write_pair(tmp_path, "gemma3", "tiny")
    jpeg = str(assets.or_skip(assets.mtmd_media, "test-1.jpeg"))
    runs = [CliRunner().invoke(cli, ["mtmd", "-m", str(model), "--mmproj", str(mmproj), flag, value, "-p", "hi",
                                     "-n", "6", "--temp", "0", "-t", "2"])
            for flag, value in (("--image", jpeg), ("--audio", jpeg), ("--image", f"{jpeg},{jpeg}"))]
    assert all(r.exit_code == 0 for r in runs), [r.output for r in runs]
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout.strip()
    assert "for 1 image(s)" in runs[1].stderr and "for 2 image(s)" in runs[2].stderr
