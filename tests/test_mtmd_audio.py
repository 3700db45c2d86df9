"""Audio in (`dasllama mtmd --audio`): the qwen2a and ultravox towers against llama.cpp's libmtmd
on llama.cpp's own test clip, greedy tokens against llama-mtmd-cli, mtmd's mel windows, the
kernels beside their references, and the bad inputs that must fail with one sentence. Tiny
random-weight pairs written with the converter's names (tests.mtmd_pairs)."""
import gguf
import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from dasllama.core.mtmd.audio_mel import MEL_FLOOR, N_FRAMES, log_mel, mel_filters, mel_windows
from dasllama.core.mtmd.mmproj import Mmproj, MmprojError
from dasllama.core.mtmd.whisper_enc import AudioTower
from dasllama.core.mtmd.audio_in import frame_count_after_resampling, linear_resample, load_clip
from dasllama.core.tools.ref_mtmd import mtmd_cli_text, mtmd_decoded_audio, mtmd_embeddings
from dasllama.kernels.speech.encoder_ops import bias_gelu_erf, bias_gelu_erf_ref, conv3_windows, conv3_windows_rows
from dasllama.kernels.speech.resample import biquad_f32, biquad_f32_ref
from dasllama.kernels.tower_rows import bias_gelu_erf_rows
from dasllama_cli.main import cli
from tests import assets, gguf_factory, mtmd_pairs

# libmtmd runs flash attention with f16 K/V; we keep K/V in f32. Its FFT is its own float32
# radix-2/DFT, ours numpy's. Measured on the tiny F16 pairs (llama.cpp 0c1e570, 2 threads):
# qwen2a 2.3e-4 (two windows 2.4e-4), ultravox 4.9e-4; with F32 matrices 2.1e-5 and 3.9e-5, so
# most of it is activations that round to the other f16 neighbour before an F16 product.
MAX_REL_ERR = 2e-3

# A qwen2a pair in Q8_0 (the converter's --outtype q8_0; its convolutions stay F16): both
# engines quantise each activation row to Q8_0, so the differences above (the FFT's, the
# summation orders') move activations by a Q8_0 step. Measured 4.2e-3, against 1.2e-2 between
# libmtmd's Q8_0 and F16 embeddings of the same weights (llama.cpp 0c1e570).
Q8_0_MAX_REL_ERR = 1e-2


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    out = tmp_path_factory.mktemp("mtmd-audio")
    return {p: mtmd_pairs.write_pair(out, p, "tiny") for p in ("qwen2a", "ultravox")}


@pytest.fixture(scope="module")
def clip():
    """llama.cpp's test-2.mp3 (17.4 s at 44.1 kHz) decoded and resampled to 16 kHz mono."""
    return load_clip(assets.or_skip(assets.mtmd_media, "test-2.mp3"))


def test_decoded_samples_match_libmtmds(pairs, clip, tmp_path):
    """libsndfile's mp3 decode through our copy of miniaudio's linear resampler against
    libmtmd's helper (miniaudio decoding and resampling): the same length, and 3.2e-5 relative
    measured (the two mp3 decoders; soxr's band-limited resampler would be ~8e-2 away)."""
    assets.or_skip(assets.llama_mtmd_bin)
    ref = mtmd_decoded_audio(*pairs["qwen2a"], assets.mtmd_media("test-2.mp3"), tmp_path)
    assert clip.shape == ref.shape
    rel = np.linalg.norm(clip - ref) / np.linalg.norm(ref)
    assert rel < 3e-4, f"relative error {rel:.2e} against libmtmd's decode"


def test_linear_resampler_lengths_and_biquad():
    assert frame_count_after_resampling(769089, 44100, 16000) == 279034
    assert frame_count_after_resampling(100, 16000, 16000) == 100
    rng = np.random.default_rng(0)
    x = rng.standard_normal(300).astype(np.float32)
    out = np.empty_like(x)
    biquad_f32(x, np.float32(0.2), np.float32(0.4), np.float32(0.2), np.float32(-0.5), np.float32(0.3), out)
    np.testing.assert_allclose(out, biquad_f32_ref(x, 0.2, 0.4, 0.2, -0.5, 0.3), rtol=1e-5, atol=1e-6)
    up = linear_resample(x, 8000, 16000)                  # upsampling filters the outputs
    assert up.shape == (frame_count_after_resampling(300, 8000, 16000),) and up[0] == 0
    same = linear_resample(x, 16000, 16000)
    assert same is x or np.array_equal(same, x)


@pytest.mark.parametrize("projector", ["qwen2a", "ultravox"])
def test_tower_embeddings_match_libmtmd(pairs, clip, projector, tmp_path):
    """Our mel + tower + projector against libmtmd's on the same 16 kHz samples (given to it
    through mtmd_bitmap_init_from_audio, so resamplers do not differ)."""
    assets.or_skip(assets.llama_mtmd_bin)
    assert_tower_matches(*pairs[projector], clip, MAX_REL_ERR, tmp_path)


def test_q8_0_tower_embeddings_match_libmtmd(clip, tmp_path_factory, tmp_path):
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = mtmd_pairs.write_pair(tmp_path_factory.mktemp("q8"), "qwen2a", "tiny", wtype="Q8_0")
    assert Mmproj(mmproj).matrix("a.blk.0.ffn_up.weight")[0] == gguf.GGMLQuantizationType.Q8_0
    assert_tower_matches(model, mmproj, clip, Q8_0_MAX_REL_ERR, tmp_path)


def assert_tower_matches(model, mmproj, clip, bound, tmp_path):
    """Our mel + tower + projector of one 30 s window within `bound` (relative) of libmtmd's."""
    mm = Mmproj(mmproj)
    (window,) = mel_windows(clip, mm.audio.n_mel)
    ours = AudioTower(mm, 2).encode(window)
    ref, _ = mtmd_embeddings(model, mmproj, clip, 2, tmp_path)
    assert ours.shape == ref.shape == (mm.audio.n_tokens, mm.audio.n_embd_text)
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    assert rel < bound, f"relative error {rel:.2e} against libmtmd"


def test_mp3_through_both_decoders(pairs, clip, tmp_path):
    """The whole chain on the mp3: our decode (libsndfile, then miniaudio's resampler copied)
    against libmtmd's own (miniaudio decoding and resampling). Measured 2.5e-4 here (0c1e570);
    with soxr's resampler instead it was 5.8e-3."""
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = pairs["qwen2a"]
    mm = Mmproj(mmproj)
    (window,) = mel_windows(clip, mm.audio.n_mel)
    ours = AudioTower(mm, 2).encode(window)
    ref, _ = mtmd_embeddings(model, mmproj, assets.mtmd_media("test-2.mp3"), 2, tmp_path)
    assert ours.shape == ref.shape
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    assert rel < MAX_REL_ERR, f"relative error {rel:.2e} against libmtmd decoding the mp3 itself"


def test_two_windows_match_libmtmd(pairs, clip, tmp_path):
    """A 35 s clip is two 30 s windows, each through the tower, their tokens one after the other."""
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = pairs["qwen2a"]
    mm = Mmproj(mmproj)
    long = np.concatenate([clip, clip])
    windows = mel_windows(long, mm.audio.n_mel)
    assert len(windows) == 2
    tower = AudioTower(mm, 2)
    ours = np.concatenate([tower.encode(w) for w in windows])
    ref, _ = mtmd_embeddings(model, mmproj, long, 2, tmp_path)
    assert ours.shape == ref.shape == (2 * mm.audio.n_tokens, mm.audio.n_embd_text)
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    assert rel < MAX_REL_ERR, f"relative error {rel:.2e} against libmtmd"


@pytest.mark.parametrize("projector", ["qwen2a", "ultravox"])
def test_greedy_tokens_match_llama_mtmd_cli(pairs, clip, projector, tmp_path):
    """The audio turn end to end (qwen2a: <|audio_bos|> embeddings <|audio_eos|> in the ChatML
    turn; ultravox: the bare embeddings; causal) against llama-mtmd-cli (its default flash
    attention, 4096 cells) on the same pair, prompt and threads, both reading test-2.mp3."""
    assets.or_skip(assets.llama_mtmd_bin)
    mp3 = assets.mtmd_media("test-2.mp3")
    model, mmproj = pairs[projector]
    prompt = "What is said in the recording?"
    ref, _ = mtmd_cli_text(model, mmproj, [], prompt, 24, 2, audios=[mp3])
    r = CliRunner().invoke(cli, ["mtmd", "-m", str(model), "--mmproj", str(mmproj), "--audio", str(mp3),
                                 "-p", prompt, "-n", "24", "--temp", "0", "-t", "2"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == ref.strip()


def test_mel_windows_as_mtmd_cuts_them():
    """n samples give (n + 480000) // 160 + 1 frames and every whole 3000-frame window; the
    padding's power is floored at 2^-24, so a clip's silent tail sits at the clamp."""
    rng = np.random.default_rng(0)
    tone = (0.1 * rng.standard_normal(16000 * 5)).astype(np.float32)
    mel = log_mel(tone, mel_filters(80))
    assert mel.shape == (80, (len(tone) + 480000) // 160 + 1)
    tail = mel[:, -100:]
    expected = (max(np.log10(MEL_FLOOR), mel_log_max(tone) - 8.0) + 4.0) / 4.0
    np.testing.assert_allclose(tail, expected, rtol=0, atol=1e-6)
    assert len(mel_windows(tone, 80)) == 1
    assert len(mel_windows(np.zeros(16000 * 31, np.float32), 80)) == 2
    assert mel_windows(tone, 80)[0].shape == (80, N_FRAMES)


def mel_log_max(samples):
    """The largest log10 mel energy before the clamp (numpy's float64 spectrogram)."""
    raw = log_mel(samples, mel_filters(80))
    return raw.max() * 4.0 - 4.0


def test_mel_filters_are_librosas_up_to_rounding():
    """mtmd's own Slaney filterbank is librosa's (which whisper ships and core/asr computes),
    rounded once instead of twice."""
    from dasllama.core.asr.mel import mel_filters as librosa_filters
    for n_mel in (80, 128):
        ours, theirs = mel_filters(n_mel), librosa_filters(n_mel)
        assert ours.shape == theirs.shape == (n_mel, 201) and ours.dtype == np.float32
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-7)


def test_gelu_erf_and_conv_windows_match_references():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 24), dtype=np.float32) * 3
    b = rng.standard_normal(24, dtype=np.float32)
    ref = bias_gelu_erf_ref(x, b)
    rows = x.copy()
    bias_gelu_erf(x, b)
    np.testing.assert_allclose(x, ref, rtol=1e-6, atol=1e-6)
    bias_gelu_erf_rows(rows, b)                      # 16 columns in IR, 8 as bias_gelu_erf
    np.testing.assert_allclose(rows, ref, rtol=1e-6, atol=1e-6)
    mel = rng.standard_normal((5, 12), dtype=np.float32)
    w = rng.standard_normal((7, 5, 3), dtype=np.float32)
    for stride in (1, 2):
        ours = conv3_windows(mel, stride) @ w.reshape(7, -1).T                 # (T_out, 7)
        padded = np.pad(mel, ((0, 0), (1, 1)))
        direct = np.array([[np.sum(w[o] * padded[:, t * stride:t * stride + 3]) for o in range(7)]
                           for t in range((12 - 1) // stride + 1)])
        np.testing.assert_allclose(ours, direct, rtol=1e-5, atol=1e-5)
        assert np.array_equal(conv3_windows_rows(np.ascontiguousarray(mel.T), stride), conv3_windows(mel, stride))


def run(*args):
    return CliRunner().invoke(cli, ["mtmd", *map(str, args)])


def test_audio_without_mmproj_is_a_usage_error(pairs):
    r = run("-m", pairs["qwen2a"][0], "--audio", "x.wav", "-p", "hi")
    assert r.exit_code == 2 and "--image and --audio need --mmproj" in r.output


def test_not_audio(pairs, tmp_path):
    junk = tmp_path / "junk.mp3"
    junk.write_bytes(b"plain text, not an mp3" * 10)
    r = run("-m", pairs["qwen2a"][0], "--mmproj", pairs["qwen2a"][1], "--audio", junk, "-p", "hi")
    assert r.exit_code == 1 and "not an image or an audio file that can be read" in r.output
    assert r.stdout == "" and "Traceback" not in r.output


def test_truncated_wav(pairs, clip, tmp_path):
    wav = tmp_path / "a.wav"
    soundfile.write(wav, clip[:16000], 16000, subtype="PCM_16")
    cut = tmp_path / "cut.wav"
    cut.write_bytes(wav.read_bytes()[:40])               # cut inside its header
    r = run("-m", pairs["qwen2a"][0], "--mmproj", pairs["qwen2a"][1], "--audio", cut, "-p", "hi")
    assert r.exit_code == 1 and "cut.wav" in r.output and "cannot decode" in r.output


def test_empty_wav(pairs, tmp_path):
    empty = tmp_path / "empty.wav"
    soundfile.write(empty, np.zeros(0, np.float32), 16000, subtype="PCM_16")
    r = run("-m", pairs["qwen2a"][0], "--mmproj", pairs["qwen2a"][1], "--audio", empty, "-p", "hi")
    assert r.exit_code == 1 and "holds no audio samples" in r.output


def test_token_counts_per_window():
    """750 (qwen2a), 1500 / stack for ultravox, the last stack padded: 188 for Ultravox's 8."""
    from dasllama.core.mtmd.mmproj import AudioHParams
    hp = dict(n_embd=64, n_ff=128, n_layer=1, n_head=4, n_mel=128, eps=1e-5, n_embd_text=64)
    assert AudioHParams("qwen2a", stack_factor=1, **hp).n_tokens == 750
    assert AudioHParams("ultravox", stack_factor=4, **hp).n_tokens == 375
    assert AudioHParams("ultravox", stack_factor=8, **hp).n_tokens == 188


def test_width_mismatch(pairs, tmp_path):
    wide = gguf_factory.write_model(tmp_path, "qwen2", "F32", n_embd=256, n_layer=1)
    mp3 = assets.or_skip(assets.mtmd_media, "test-2.mp3")
    r = run("-m", wide, "--mmproj", pairs["qwen2a"][1], "--audio", mp3, "-p", "hi")
    assert r.exit_code == 1 and "128 wide" in r.output and "256 wide" in r.output


def test_audio_mmproj_for_another_family(pairs, tmp_path):
    llama = gguf_factory.write_model(tmp_path, "llama", "F32", n_embd=128, n_layer=1)
    mp3 = assets.or_skip(assets.mtmd_media, "test-2.mp3")
    r = run("-m", llama, "--mmproj", pairs["qwen2a"][1], "--audio", mp3, "-p", "hi")
    assert r.exit_code == 1 and "'llama' model" in r.output and "(qwen2, qwen2vl)" in r.output


def test_audio_with_an_image_only_mmproj(tmp_path):
    model, mmproj = mtmd_pairs.write_pair(tmp_path, "gemma3", "tiny")
    mp3 = assets.or_skip(assets.mtmd_media, "test-2.mp3")
    r = run("-m", model, "--mmproj", mmproj, "--audio", mp3, "-p", "hi")
    assert r.exit_code == 1 and "vision tower only" in r.output and "--audio" in r.output
    assert r.stdout == ""


def test_image_with_an_audio_only_mmproj(pairs):
    jpeg = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    r = run("-m", pairs["qwen2a"][0], "--mmproj", pairs["qwen2a"][1], "--image", jpeg, "-p", "hi")
    assert r.exit_code == 1 and "audio tower only" in r.output and "--image" in r.output
    assert r.stdout == ""


def test_unsupported_audio_projector_names_the_supported_ones(tmp_path):
    path = tmp_path / "voxtral.gguf"
    w = gguf.GGUFWriter(str(path), "clip")
    w.add_clip_has_audio_encoder(True)
    w.add_clip_projector_type("voxtral")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    with pytest.raises(MmprojError, match=r"audio projector type 'voxtral'.*qwen2a \(audio\), ultravox \(audio\)"):
        Mmproj(path)
