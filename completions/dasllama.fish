# fish completion for dasllama 0.1.0: every command and flag of `dasllama COMMAND --help`.
# Static, so a TAB does not start Python; update it with the commands' flags.
# Install it as ~/.config/fish/completions/dasllama.fish.
set -l commands generate transcribe tune bench verify
complete -c dasllama -f
complete -c dasllama -n "not __fish_seen_subcommand_from $commands" -l version -d 'Show the version and exit'
complete -c dasllama -s h -l help -d 'Show the help and exit'
complete -c dasllama -n "not __fish_seen_subcommand_from $commands" -a generate -d 'Generate text from PROMPT with a GGUF model, streaming it to stdout'
complete -c dasllama -n "not __fish_seen_subcommand_from $commands" -a transcribe -d 'Transcribe AUDIO files (wav, flac, ogg, mp3; \'-\' for stdin) with a Whisper model'
complete -c dasllama -n "not __fish_seen_subcommand_from $commands" -a tune -d 'Race the kernel variants on this machine and keep the fastest (pin one with DASLLAMA_KERNELS)'
complete -c dasllama -n "not __fish_seen_subcommand_from $commands" -a bench -d 'Measure prompt (pp) and generation (tg) speed as llama-bench does'
complete -c dasllama -n "not __fish_seen_subcommand_from $commands" -a verify -d 'Check that our engine decodes the same greedy tokens as llama.cpp on the same prompts, or (--asr)...'

# generate
complete -c dasllama -n '__fish_seen_subcommand_from generate' -s m -l model -r -F -d 'GGUF model file (default: the installed default model, Gemma 3 270M)'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -s p -l prompt -x -d 'Prompt text'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -s f -l file -r -F -d 'Read the prompt from a file (\'-\' for stdin)'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -s n -l n-predict -x -d 'Tokens to generate (-1: until end of text or full context)'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -s c -l ctx-size -x -d 'Context size in tokens (0: the model\'s training context)'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -s t -l threads -x -d 'Threads (default: all cores)'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -s b -l batch-size -x -d 'Prompt tokens per forward pass'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -l temp -x -d 'Temperature'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -l top-k -x -d 'Top-k sampling: keep the k most likely tokens'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -l top-p -x -d 'Top-p (nucleus) sampling'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -l min-p -x -d 'Min-p sampling'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -l repeat-penalty -x -d 'Repetition penalty (1.0: off)'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -l repeat-last-n -x -d 'Tokens the repetition penalty looks back over'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -s s -l seed -x -d 'RNG seed (-1: random)'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -l chat -d 'Render the prompt through the model\'s chat template'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -o sys -l system-prompt -x -d 'System message for --chat'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -l ignore-eos -d 'Keep generating past end-of-text tokens'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -l json -d 'Print one JSON record (text, token ids, timings) instead of streaming'
complete -c dasllama -n '__fish_seen_subcommand_from generate' -s q -l quiet -d 'Nothing on stderr: no timing line, no first-run compile notice'

# transcribe
complete -c dasllama -n '__fish_seen_subcommand_from transcribe' -s m -l model -r -F -d 'whisper.cpp ggml .bin or faster-whisper (CTranslate2) model directory (default: an inst...'
complete -c dasllama -n '__fish_seen_subcommand_from transcribe' -s f -l format -x -a 'txt srt vtt json tsv' -d 'Output format'
complete -c dasllama -n '__fish_seen_subcommand_from transcribe' -s o -l output-dir -x -a '(__fish_complete_directories)' -d 'Write <audio name>.<format> files here instead of printing to stdout'
complete -c dasllama -n '__fish_seen_subcommand_from transcribe' -s l -l language -x -d 'Spoken language (code or name)'
complete -c dasllama -n '__fish_seen_subcommand_from transcribe' -l task -x -a 'transcribe translate' -d 'translate: English text from any language'
complete -c dasllama -n '__fish_seen_subcommand_from transcribe' -o nt -l no-timestamps -d 'Decode without timestamp tokens'
complete -c dasllama -n '__fish_seen_subcommand_from transcribe' -s t -l threads -x -d 'Threads (default: all cores)'
complete -c dasllama -n '__fish_seen_subcommand_from transcribe' -s q -l quiet -d 'No timings or progress on stderr'
complete -c dasllama -n '__fish_seen_subcommand_from transcribe' -F

# tune
complete -c dasllama -n '__fish_seen_subcommand_from tune' -s m -l model -r -F -d 'GGUF model to tune for: its weight formats and shapes (default: the installed default m...'
complete -c dasllama -n '__fish_seen_subcommand_from tune' -l budget -x -d 'Seconds of timing races'
complete -c dasllama -n '__fish_seen_subcommand_from tune' -s t -l threads -x -d 'Threads to race with (default: numba\'s, as generation uses)'
complete -c dasllama -n '__fish_seen_subcommand_from tune' -l show -d 'Print the variant in force for each weight type and why, and exit'
complete -c dasllama -n '__fish_seen_subcommand_from tune' -l reset -d 'Delete this machine\'s tuning sidecar (then tune, if -m is given)'
complete -c dasllama -n '__fish_seen_subcommand_from tune' -l force -d 'Tune even on a busy machine, and race again what the sidecar already holds'
complete -c dasllama -n '__fish_seen_subcommand_from tune' -l no-warm -d 'Do not compile the decode step with the new winners now (the next run will)'

# bench
complete -c dasllama -n '__fish_seen_subcommand_from bench' -s m -l model -r -F -d 'GGUF model file (default: the installed default model), or a Whisper model (whisper.cpp...'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -l asr -d 'Time transcriptions of AUDIO files (implied when -m is a Whisper model)'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -s p -l n-prompt -x -d 'Prompt tokens of the pp tests (comma-separated list; 0: none)'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -s n -l n-gen -x -d 'Generated tokens of the tg tests (comma-separated list; 0: none)'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -s r -l repetitions -x -d 'Samples per test'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -s t -l threads -x -d 'Threads for both engines (default: the physical cores, as llama-bench)'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -s o -l output -x -a 'md json csv jsonl' -d 'Output format'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -l ref -x -a 'llama.cpp whisper.cpp' -d 'Run llama-bench (or for Whisper, whisper.cpp through pywhispercpp) on the same weights...'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -l ref-bin -x -a '(__fish_complete_directories)' -d 'Dir with llama-bench (default: PATH, then dasllama\'s cache)'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -l ref-model -r -F -d 'File for the reference to load instead of -m (Whisper default: -m as a ggml .bin)'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -l wait-idle -x -d 'Before each sample, wait up to this many seconds for other processes to leave the CPUs'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -l receipt -r -F -d 'Write the results with the receipt (commands, versions, sha256 of inputs, hardware) as...'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -s l -l language -x -d 'Whisper: spoken language for both engines (default: detect; English-only models: en)'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -l task -x -a 'transcribe translate' -d 'Whisper: the task for both engines'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -o nt -l no-timestamps -d 'Whisper: decode without timestamp tokens'
complete -c dasllama -n '__fish_seen_subcommand_from bench' -F

# verify
complete -c dasllama -n '__fish_seen_subcommand_from verify' -s m -l model -r -F -d 'GGUF model file (default: the installed default model)'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l asr -d 'Verify a Whisper model on AUDIO files against whisper.cpp (pywhispercpp), greedy on bot...'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -s p -l prompt -x -d 'Prompt to decode greedily'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -s n -l n-predict -x -d 'Tokens to generate per prompt'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l ref -x -a 'llama.cpp whisper.cpp' -d 'Reference engine (default: llama.cpp; whisper.cpp with --asr)'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l ref-bin -x -a '(__fish_complete_directories)' -d 'Dir with llama.cpp\'s tools (default: PATH, then llama-cpp-python, then dasllama\'s cache)'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l ref-model -r -F -d 'File for the reference to load instead of -m (e.g. the source of a requantized file; wi...'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -s t -l threads -x -d 'Threads for both engines (default: all cores)'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -s c -l ctx-size -x -d 'Context size for both engines'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l tie-gap -x -d 'A flip is a near-tie when the two engines\' margins between the two tokens add up to no...'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l drift-bound -x -d 'Drift past this (relative to a tensor\'s RMS) names the layer where the engines part'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l layers -l no-layers -d 'Compare per-layer activations always / never (default: when tokens differ)'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -s l -l language -x -d '--asr: spoken language for both engines (default: detect; English-only models: en)'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l task -x -a 'transcribe translate' -d '--asr: the task for both engines'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -o nt -l no-timestamps -d '--asr: decode without timestamp tokens'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l strict -d 'Fail (exit 1) on near-ties too'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -l json -d 'Print one JSON report instead of text'
complete -c dasllama -n '__fish_seen_subcommand_from verify' -F
