"""The prose of the man pages that the click tree does not hold (roff): what a command is for
beyond its one-line help, and dasllama(1)'s exit status, environment, files and examples.
Flags, defaults, ranges and choices come from the commands themselves (docs_gen.py)."""

DESCRIPTION = r"""
.B dasllama
runs GGUF language models, Whisper speech-to-text and Piper text-to-speech on the CPU, with
numba kernels that work on the quantized blocks as they lie in the file, and runs a reference
engine (llama.cpp, whisper.cpp, piper-tts) beside it to check parity and measure speed. The
answer goes to standard output; logs, timings, the first-run compile notice and progress bars
go to standard error.
.PP
Flags follow llama.cpp where the meaning is the same, and whisper.cpp / openai-whisper for
transcription. \fB\-\fR as a file means standard input. Every command takes
\fB\-h\fR, \fB\-\-help\fR; each has its own page, \fBdasllama\-\fR\fICOMMAND\fR(1).
.PP
\fB\-m\fR takes a path, or a name that \fBdasllama models\fR lists (a model installed as a
package or found in the cache directory). Nothing is downloaded from a model hub.
"""

# More on a command than its --help line says; the page's DESCRIPTION, after that line.
DETAILS = {
    "generate": r"""
\fIPROMPT\fR is an argument, \fB\-p\fR, \fB\-f\fR \fIFILE\fR, or piped standard input (an
argument and piped standard input are joined, the argument first). Without \fB\-m\fR the
model is \fBDASLLAMA_MODEL\fR, else the default model (Gemma 3 270M Q4_K_M, from the
\fBgemma3\-270m\-q4\-k\-m\-gguf\fR package). A context above the model's training context is
warned about with the memory its KV cache takes. With \fB\-\-chat\fR, no prompt and standard
input a terminal, a multi-turn session keeps the KV cache between turns (\fB/clear\fR starts
over, \fB/exit\fR or Ctrl-D ends).
""",
    "transcribe": r"""
The model is a whisper.cpp ggml \fI.bin\fR or a faster-whisper (CTranslate2) directory;
without \fB\-m\fR an installed tiny.en is used (the \fBmeeting\-noter\-models\fR package, the
\fBdefault\-whisper\fR extra). The output goes to standard output, or to
\fIAUDIO\fR.\fIFORMAT\fR files in \fB\-o\fR \fIDIR\fR.
""",
    "speak": r"""
The voice is \fIVOICE.onnx\fR with its \fIVOICE.onnx.json\fR beside it, one utterance per
input line. Phonemes come from a built-in English G2P; \fB\-\-phonemizer espeak\fR takes
espeak-ng's (as the \fBpiper\-tts\fR package bundles it), in any language.
""",
    "verify": r"""
Where the tokens part, the first tensor that differs is named. With \fB\-\-asr\fR (implied
when \fB\-m\fR is a Whisper model) each \fIAUDIO\fR is transcribed greedily by our Whisper
and by whisper.cpp (through \fBpywhispercpp\fR) on the same weights and threads, and the token
ids, start times and transcripts compared segment by segment.
.PP
Exit status: 0 on parity (or near-ties), 1 on a divergence, 2 when nothing could be compared
(a missing model, clip, reference engine or \fBpywhispercpp\fR).
""",
    "bench": r"""
llama-bench (\fB\-\-ref llama.cpp\fR), whisper.cpp (\fB\-\-ref whisper.cpp\fR) or piper-tts
run interleaved with ours, and the ratio of speeds is reported; \fB\-\-receipt\fR writes the
figures with the CPU and versions they were measured on.
""",
    "tune": r"""
The variants and weight layouts are gated against the plain reference (bit-exact for the
quantized formats); the fastest per weight type and phase are kept in the tuning sidecar.
""",
    "serve": r"""
As llama-server: the chat and completion endpoints stream server-sent events or not;
\fBresponse_format\fR JSON schemas and \fBtools\fR are forced by a grammar; \fB\-np\fR
sequences decode together, each with its own KV cache and c/np of the context; a full queue
answers 503 with Retry-After; CORS is off unless \fB\-\-cors\fR names an origin.
""",
    "models": r"""
Each row gives the name \fB\-m\fR accepts, its kind (gguf, whisper, piper), its size and its
path. Models come from installed packages (the default Gemma 3 model, the
\fBmeeting\-noter\-models\fR Whisper model, Piper voices shipped as packages) and from the
cache directory.
""",
}

SECTIONS = r"""
.SH EXIT STATUS
0 on success, 1 on a bad model file or input (with a one-sentence reason), 2 on a usage error
(including a flag out of its range), 130 when interrupted (Ctrl-C; the text streamed so far
stays), 141 when standard output is a pipe its reader closed (as \fByes | head\fR). A
traceback followed by a request to report it means a bug in dasllama.
.SH ENVIRONMENT
.TP
.B DASLLAMA_MODEL
The model of the language-model commands when \fB\-m\fR is not given: a path or a name from
\fBdasllama models\fR.
.TP
.B DASLLAMA_CACHE
The cache directory (default \fI~/.cache/dasllama\fR on Linux).
.TP
.B DASLLAMA_CONFIG
The directory of the tuning sidecar (default \fI~/.config/dasllama\fR on Linux).
.TP
.B DASLLAMA_KERNELS
Pin kernel variants or layouts over the sidecar, per weight type and optionally phase, e.g.
\fBQ8_0:prefill=simd_r4t4,Q8_0:decode=file\fR.
.TP
.B DASLLAMA_API_KEY
The key \fBserve\fR requires and \fBbench \-\-serve\fR sends.
.SH FILES
.TP
.I ~/.cache/dasllama
numba's compiled kernels, the assembled default model, converted Whisper \fI.bin\fR files and
the llama.cpp reference build (\fBDASLLAMA_CACHE\fR moves it). The first run of a dasllama
version on a machine compiles its kernels into it (\fBgenerate\fR says so on standard error).
.TP
.I ~/.config/dasllama/tune.json
The tuning sidecar: per weight type and phase the kernel variant and the layout, with the CPU
and versions they were raced on; one from another machine or version is refused with its
reason.
.SH SHELL COMPLETION
\fBdasllama \-\-completion bash\fR (or \fBzsh\fR, \fBfish\fR) prints the completion script of
that shell; a wheel install also puts them where the shells look. For example:
.PP
.nf
eval "$(dasllama \-\-completion bash)"          # in ~/.bashrc
dasllama \-\-completion fish > ~/.config/fish/completions/dasllama.fish
.fi
.SH EXAMPLES
.nf
dasllama generate \-m model.gguf \-p "The capital of France is" \-n 64 \-\-temp 0
echo "Write a haiku about rain" | dasllama generate \-m model.gguf \-\-chat
dasllama generate \-m model.gguf \-\-chat \-\-json\-schema person.json "Make up a person"
dasllama models
dasllama transcribe \-m whisper\-tiny.en\-ct2/ \-f srt \-o subs/ clip.wav
dasllama speak \-m en_US\-joe\-medium.onnx "Hello there." \-o out.wav
dasllama tune \-m model.gguf \-\-budget 60
dasllama bench \-m model.gguf \-\-ref llama.cpp \-r 3 \-t 2 \-\-receipt receipt.json
dasllama verify \-m model.gguf \-p "Once upon a time" \-n 32
.fi
"""

SEE_ALSO_REFERENCES = r""".BR llama\-cli (1),
.BR llama\-bench (1),
.BR whisper\-cli (1)"""
