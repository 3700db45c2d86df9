# bash completion for dasllama 0.1.0: every command and flag of `dasllama COMMAND --help`.
# Static, so a TAB does not start Python; update it with the commands' flags.
# Source it, or install it as /usr/share/bash-completion/completions/dasllama.
_dasllama() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            generate|transcribe|speak|tune|bench|verify|serve) cmd=${COMP_WORDS[i]}; break ;;
        esac
    done
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "generate transcribe speak tune bench verify serve --version -h --help" -- "$cur"))
        return
    fi
    case $cmd:$prev in
        generate:-m|generate:--model|generate:-f|generate:--file)
            COMPREPLY=(); compopt -o default; return ;;
        generate:-p|generate:--prompt|generate:-n|generate:--n-predict|generate:-c|generate:--ctx-size|generate:-t|generate:--threads|generate:-b|generate:--batch-size|generate:--temp|generate:--top-k|generate:--top-p|generate:--min-p|generate:--repeat-penalty|generate:--repeat-last-n|generate:-s|generate:--seed|generate:-sys|generate:--system-prompt|generate:--json-schema|generate:--stop)
            COMPREPLY=(); return ;;
        transcribe:-m|transcribe:--model)
            COMPREPLY=(); compopt -o default; return ;;
        transcribe:-f|transcribe:--format)
            COMPREPLY=($(compgen -W "txt srt vtt json tsv" -- "$cur")); return ;;
        transcribe:-o|transcribe:--output-dir)
            COMPREPLY=(); compopt -o dirnames; return ;;
        transcribe:-l|transcribe:--language|transcribe:-t|transcribe:--threads)
            COMPREPLY=(); return ;;
        transcribe:--task)
            COMPREPLY=($(compgen -W "transcribe translate" -- "$cur")); return ;;
        speak:-m|speak:--model|speak:-f|speak:--file|speak:-o|speak:--output-file)
            COMPREPLY=(); compopt -o default; return ;;
        speak:-s|speak:--speaker|speak:--speed|speak:--length-scale|speak:--noise-scale|speak:--noise-w|speak:--noise-w-scale|speak:--sentence-silence|speak:--rate|speak:-t|speak:--threads)
            COMPREPLY=(); return ;;
        speak:--phonemizer)
            COMPREPLY=($(compgen -W "lexicon espeak" -- "$cur")); return ;;
        tune:-m|tune:--model)
            COMPREPLY=(); compopt -o default; return ;;
        serve:-m|serve:--model|serve:--whisper-model|serve:--voice-model)
            COMPREPLY=(); compopt -o default; return ;;
        serve:-a|serve:--model-alias|serve:--host|serve:--port|serve:-t|serve:--threads|serve:-c|serve:--ctx-size|serve:-np|serve:--parallel|serve:-b|serve:--batch-size|serve:--queue|serve:--api-key|serve:--cors|serve:--max-body)
            COMPREPLY=(); return ;;
        tune:--budget|tune:-t|tune:--threads)
            COMPREPLY=(); return ;;
        bench:-m|bench:--model|bench:--ref-model|bench:--receipt)
            COMPREPLY=(); compopt -o default; return ;;
        bench:-p|bench:--n-prompt|bench:-n|bench:--n-gen|bench:--sentences|bench:-r|bench:--repetitions|bench:-t|bench:--threads|bench:--wait-idle|bench:-l|bench:--language)
            COMPREPLY=(); return ;;
        bench:-o|bench:--output)
            COMPREPLY=($(compgen -W "md json csv jsonl" -- "$cur")); return ;;
        bench:--ref)
            COMPREPLY=($(compgen -W "llama.cpp whisper.cpp piper" -- "$cur")); return ;;
        bench:--ref-bin)
            COMPREPLY=(); compopt -o dirnames; return ;;
        bench:--task)
            COMPREPLY=($(compgen -W "transcribe translate" -- "$cur")); return ;;
        verify:-m|verify:--model|verify:--ref-model)
            COMPREPLY=(); compopt -o default; return ;;
        verify:-p|verify:--prompt|verify:-n|verify:--n-predict|verify:-t|verify:--threads|verify:-c|verify:--ctx-size|verify:--tie-gap|verify:--drift-bound|verify:-l|verify:--language)
            COMPREPLY=(); return ;;
        verify:--ref)
            COMPREPLY=($(compgen -W "llama.cpp whisper.cpp piper" -- "$cur")); return ;;
        verify:--ref-bin)
            COMPREPLY=(); compopt -o dirnames; return ;;
        verify:--task)
            COMPREPLY=($(compgen -W "transcribe translate" -- "$cur")); return ;;
    esac
    if [[ $cur == -* ]]; then
        local opts
        case $cmd in
            generate) opts="-m --model -p --prompt -f --file -n --n-predict -c --ctx-size -t --threads -b --batch-size --temp --top-k --top-p --min-p --repeat-penalty --repeat-last-n -s --seed --chat --chat-template --grammar --json-schema --stop -sys --system-prompt --ignore-eos --json -q --quiet -h --help" ;;
            transcribe) opts="-m --model -f --format -o --output-dir -l --language --task -nt --no-timestamps -t --threads -q --quiet -h --help" ;;
            speak) opts="-m --model -f --file -o --output-file --output-raw --json-input --rate -s --speaker --speed --length-scale --noise-scale --noise-w --noise-w-scale --sentence-silence --phonemizer -t --threads -q --quiet -h --help" ;;
            tune) opts="-m --model --budget -t --threads --show --reset --force --no-warm -h --help" ;;
            bench) opts="-m --model --asr -p --n-prompt -n --n-gen --sentences -r --repetitions -t --threads -o --output --ref --ref-bin --ref-model --wait-idle --receipt -l --language --task -nt --no-timestamps -h --help" ;;
            serve) opts="-m --model -a --model-alias --host --port -t --threads -c --ctx-size -np --parallel -b --batch-size --queue --api-key --cors --embeddings --no-embeddings --whisper-model --voice-model --max-body -q --quiet -h --help" ;;
            verify) opts="-m --model --asr -p --prompt -n --n-predict --ref --ref-bin --ref-model -t --threads -c --ctx-size --tie-gap --drift-bound --layers --no-layers -l --language --task -nt --no-timestamps --strict --json -h --help" ;;
        esac
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        case $cmd in
            transcribe|bench|verify) COMPREPLY=(); compopt -o default ;;   # AUDIO files
        esac
    fi
}
complete -F _dasllama dasllama
