#compdef dasllama
# zsh completion for dasllama 0.1.0: every command and flag of `dasllama COMMAND --help`.
# Static, so a TAB does not start Python; update it with the commands' flags.
# Put it on $fpath as _dasllama, or source it after compinit.

_dasllama_generate() {
    _arguments -S \
        '(-m --model)'{-m,--model}'[GGUF model file (default\: the installed default model, Gemma 3 270M)]:model:_files' \
        '(-p --prompt)'{-p,--prompt}'[Prompt text]:prompt: ' \
        '(-f --file)'{-f,--file}'[Read the prompt from a file ('\''-'\'' for stdin)]:file:_files' \
        '(-n --n-predict)'{-n,--n-predict}'[Tokens to generate (-1\: until end of text or full context)]:n-predict: ' \
        '(-c --ctx-size)'{-c,--ctx-size}'[Context size in tokens (0\: the model'\''s training context)]:ctx-size: ' \
        '(-t --threads)'{-t,--threads}'[Threads (default\: all cores)]:threads: ' \
        '(-b --batch-size)'{-b,--batch-size}'[Prompt tokens per forward pass]:batch-size: ' \
        '--temp[Temperature]:temp: ' \
        '--top-k[Top-k sampling\: keep the k most likely tokens]:top-k: ' \
        '--top-p[Top-p (nucleus) sampling]:top-p: ' \
        '--min-p[Min-p sampling]:min-p: ' \
        '--repeat-penalty[Repetition penalty (1.0\: off)]:repeat-penalty: ' \
        '--repeat-last-n[Tokens the repetition penalty looks back over]:repeat-last-n: ' \
        '(-s --seed)'{-s,--seed}'[RNG seed (-1\: random)]:seed: ' \
        '--chat[Render the prompt through the model'\''s chat template; no prompt on a terminal: a session]' \
        '--chat-template[Jinja chat template FILE instead of the model'\''s]:file:_files' \
        '--grammar[Constrain the output to a GBNF grammar FILE]:file:_files' \
        '--json-schema[Constrain the output to JSON valid against this schema]:schema:_files' \
        '*--stop[Stop when the text contains STRING]:string: ' \
        '(-sys --system-prompt)'{-sys,--system-prompt}'[System message for --chat]:system-prompt: ' \
        '--ignore-eos[Keep generating past end-of-text tokens]' \
        '--json[Print one JSON record (text, token ids, timings) instead of streaming]' \
        '(-q --quiet)'{-q,--quiet}'[Nothing on stderr\: no timing line, no first-run compile notice]' \
        '(- *)'{-h,--help}'[Show the help and exit]' \
        '1:prompt: '
}

_dasllama_transcribe() {
    _arguments -S \
        '(-m --model)'{-m,--model}'[whisper.cpp ggml .bin or faster-whisper (CTranslate2) model directory (default\: an inst...]:model:_files' \
        '(-f --format)'{-f,--format}'[Output format]:format:(txt srt vtt json tsv)' \
        '(-o --output-dir)'{-o,--output-dir}'[Write <audio name>.<format> files here instead of printing to stdout]:output-dir:_files -/' \
        '(-l --language)'{-l,--language}'[Spoken language (code or name)]:language: ' \
        '--task[translate\: English text from any language]:task:(transcribe translate)' \
        '(-nt --no-timestamps)'{-nt,--no-timestamps}'[Decode without timestamp tokens]' \
        '(-t --threads)'{-t,--threads}'[Threads (default\: all cores)]:threads: ' \
        '(-q --quiet)'{-q,--quiet}'[No timings or progress on stderr]' \
        '(- *)'{-h,--help}'[Show the help and exit]' \
        '*:audio file:_files'
}

_dasllama_speak() {
    _arguments -S \
        '(-m --model)'{-m,--model}'[Piper voice .onnx (its .onnx.json beside it)]:model:_files' \
        '(-f --file)'{-f,--file}'[Read the text from FILE, one utterance per line]:file:_files' \
        '(-o --output-file)'{-o,--output-file}'[Write a WAV file (- for stdout)]:output-file:_files' \
        '--output-raw[Stream raw s16le mono PCM to stdout (the sample rate goes to stderr)]' \
        '(-s --speaker)'{-s,--speaker}'[Speaker id or name (multi-speaker voices)]:speaker: ' \
        '--speed[Speaking rate\: 2 is twice as fast]:speed: ' \
        '--length-scale[Phoneme length, as piper names it (overrides --speed)]:length-scale: ' \
        '--noise-scale[Generator noise]:noise-scale: ' \
        '(--noise-w --noise-w-scale)'{--noise-w,--noise-w-scale}'[Phoneme width noise]:noise-w: ' \
        '--sentence-silence[Seconds of silence after each sentence]:sentence-silence: ' \
        '--json-input[Input lines are JSON objects as piper reads them]' \
        '--rate[Resample the output to this many Hz (soxr)]:rate: ' \
        '--phonemizer[Text to phonemes]:phonemizer:(lexicon espeak)' \
        '(-t --threads)'{-t,--threads}'[Threads (default\: all cores)]:threads: ' \
        '(-q --quiet)'{-q,--quiet}'[No timings on stderr]' \
        '(- *)'{-h,--help}'[Show the help and exit]' \
        '*:text: '
}

_dasllama_tune() {
    _arguments -S \
        '(-m --model)'{-m,--model}'[GGUF model to tune for\: its weight formats and shapes (default\: the installed default m...]:model:_files' \
        '--budget[Seconds of timing races]:budget: ' \
        '(-t --threads)'{-t,--threads}'[Threads to race with (default\: numba'\''s, as generation uses)]:threads: ' \
        '--show[Print the variant in force for each weight type and why, and exit]' \
        '--reset[Delete this machine'\''s tuning sidecar (then tune, if -m is given)]' \
        '--force[Tune even on a busy machine, and race again what the sidecar already holds]' \
        '--no-warm[Do not compile the decode step with the new winners now (the next run will)]' \
        '(- *)'{-h,--help}'[Show the help and exit]'
}

_dasllama_bench() {
    _arguments -S \
        '(-m --model)'{-m,--model}'[GGUF model file (default\: the installed default model), or a Whisper model (whisper.cpp...]:model:_files' \
        '--asr[Time transcriptions of AUDIO files (implied when -m is a Whisper model)]' \
        '(-p --n-prompt)'{-p,--n-prompt}'[Prompt tokens of the pp tests (comma-separated list; 0\: none)]:n-prompt: ' \
        '(-n --n-gen)'{-n,--n-gen}'[Generated tokens of the tg tests (comma-separated list; 0\: none)]:n-gen: ' \
        '(-r --repetitions)'{-r,--repetitions}'[Samples per test]:repetitions: ' \
        '(-t --threads)'{-t,--threads}'[Threads for both engines (default\: the physical cores, as llama-bench)]:threads: ' \
        '(-o --output)'{-o,--output}'[Output format]:output:(md json csv jsonl)' \
        '--ref[Run llama-bench (or for Whisper, whisper.cpp through pywhispercpp) on the same weights...]:ref:(llama.cpp whisper.cpp piper)' \
        '--sentences[Piper voice\: sentences spoken per sample]:sentences: ' \
        '--ref-bin[Dir with llama-bench (default\: PATH, then dasllama'\''s cache)]:ref-bin:_files -/' \
        '--ref-model[File for the reference to load instead of -m (Whisper default\: -m as a ggml .bin)]:ref-model:_files' \
        '--wait-idle[Before each sample, wait up to this many seconds for other processes to leave the CPUs]:wait-idle: ' \
        '--receipt[Write the results with the receipt (commands, versions, sha256 of inputs, hardware) as...]:receipt:_files' \
        '(-l --language)'{-l,--language}'[Whisper\: spoken language for both engines (default\: detect; English-only models\: en)]:language: ' \
        '--task[Whisper\: the task for both engines]:task:(transcribe translate)' \
        '(-nt --no-timestamps)'{-nt,--no-timestamps}'[Whisper\: decode without timestamp tokens]' \
        '(- *)'{-h,--help}'[Show the help and exit]' \
        '*:audio file:_files'
}

_dasllama_verify() {
    _arguments -S \
        '(-m --model)'{-m,--model}'[GGUF model file (default\: the installed default model)]:model:_files' \
        '--asr[Verify a Whisper model on AUDIO files against whisper.cpp (pywhispercpp), greedy on bot...]' \
        *'(-p --prompt)'{-p,--prompt}'[Prompt to decode greedily]:prompt: ' \
        '(-n --n-predict)'{-n,--n-predict}'[Tokens to generate per prompt]:n-predict: ' \
        '--ref[Reference engine (default\: llama.cpp; whisper.cpp with --asr)]:ref:(llama.cpp whisper.cpp piper)' \
        '--ref-bin[Dir with llama.cpp'\''s tools (default\: PATH, then llama-cpp-python, then dasllama'\''s cache)]:ref-bin:_files -/' \
        '--ref-model[File for the reference to load instead of -m (e.g. the source of a requantized file; wi...]:ref-model:_files' \
        '(-t --threads)'{-t,--threads}'[Threads for both engines (default\: all cores)]:threads: ' \
        '(-c --ctx-size)'{-c,--ctx-size}'[Context size for both engines]:ctx-size: ' \
        '--tie-gap[A flip is a near-tie when the two engines'\'' margins between the two tokens add up to no...]:tie-gap: ' \
        '--drift-bound[Drift past this (relative to a tensor'\''s RMS) names the layer where the engines part]:drift-bound: ' \
        '(--layers --no-layers)'{--layers,--no-layers}'[Compare per-layer activations always / never (default\: when tokens differ)]' \
        '(-l --language)'{-l,--language}'[--asr\: spoken language for both engines (default\: detect; English-only models\: en)]:language: ' \
        '--task[--asr\: the task for both engines]:task:(transcribe translate)' \
        '(-nt --no-timestamps)'{-nt,--no-timestamps}'[--asr\: decode without timestamp tokens]' \
        '--strict[Fail (exit 1) on near-ties too]' \
        '--json[Print one JSON report instead of text]' \
        '(- *)'{-h,--help}'[Show the help and exit]' \
        '*:audio file:_files'
}

_dasllama_serve() {
    _arguments -S \
        '(-m --model)'{-m,--model}'[GGUF model file]:model:_files' \
        '(-a --model-alias)'{-a,--model-alias}'[The model'\''s name in the API]:alias: ' \
        '--host[Address to listen on]:host: ' \
        '--port[Port]:port: ' \
        '(-t --threads)'{-t,--threads}'[Threads]:threads: ' \
        '(-c --ctx-size)'{-c,--ctx-size}'[Context size in tokens, shared by the parallel sequences]:ctx-size: ' \
        '(-np --parallel)'{-np,--parallel}'[Sequences decoded together]:parallel: ' \
        '(-b --batch-size)'{-b,--batch-size}'[Prompt tokens per forward pass]:batch-size: ' \
        '--queue[Requests that may wait for a free sequence]:queue: ' \
        '--api-key[Require Authorization\: Bearer KEY]:key: ' \
        '*--cors[Allow browser requests from ORIGIN]:origin: ' \
        '(--no-embeddings)--embeddings[Serve /v1/embeddings]' \
        '(--embeddings)--no-embeddings[Do not serve /v1/embeddings]' \
        '--whisper-model[A Whisper model for /v1/audio/transcriptions]:model:_files' \
        '--voice-model[A Piper voice for /v1/audio/speech]:voice:_files' \
        '--max-body[Largest request body in bytes]:bytes: ' \
        '(-q --quiet)'{-q,--quiet}'[Only errors on stderr]' \
        '(- *)'{-h,--help}'[Show the help and exit]'
}

_dasllama() {
    local -a commands
    commands=(
        'generate:Generate text from PROMPT with a GGUF model, streaming it to stdout'
        'transcribe:Transcribe AUDIO files (wav, flac, ogg, mp3; '\''-'\'' for stdin) with a Whisper model'
        'speak:Speak TEXT (or -f FILE, or stdin) with a Piper voice, as WAV or raw PCM'
        'tune:Race the kernel variants on this machine and keep the fastest (pin one with DASLLAMA_KERNELS)'
        'bench:Measure prompt (pp) and generation (tg) speed as llama-bench does'
        'serve:Serve a model over the OpenAI API (chat, completions, embeddings, audio)'
        'verify:Check that our engine decodes the same greedy tokens as llama.cpp on the same prompts, or (--asr)...'
    )
    local curcontext=$curcontext state line
    _arguments -C \
        '(- *)--version[Show the version and exit]' \
        '(- *)'{-h,--help}'[Show the help and exit]' \
        '1:command:->command' \
        '*::argument:->argument'
    case $state in
        command) _describe -t commands 'dasllama command' commands ;;
        argument)
            case $words[1] in
                generate|transcribe|speak|tune|bench|verify|serve) _dasllama_$words[1] ;;
            esac ;;
    esac
}

if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _dasllama "$@"
else
    compdef _dasllama dasllama
fi
