"""A transcript as text in the formats whisper.cpp and openai-whisper write: txt, srt, vtt, tsv,
and whisper.cpp's JSON (`-oj`, with the token ids of `-ojf`).

    from dasllama.core.asr.writers import RENDER
    text = RENDER["srt"](transcript, model=model, params={})
"""
import json

FORMATS = ("txt", "srt", "vtt", "json", "tsv")


def timestamp(seconds, comma=False, always_hours=True):
    ms = int(round(seconds * 1000))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    head = f"{h:02d}:" if always_hours or h else ""
    return f"{head}{m:02d}:{s:02d}{',' if comma else '.'}{ms:03d}"


def render_txt(transcript, **_):
    return "".join(s.text.strip() + "\n" for s in transcript.segments)


def render_srt(transcript, **_):
    return "".join(f"{i}\n{timestamp(s.start, True)} --> {timestamp(s.end, True)}\n"
                   f"{s.text.strip()}\n\n" for i, s in enumerate(transcript.segments, 1))


def render_vtt(transcript, **_):
    return "WEBVTT\n\n" + "".join(
        f"{timestamp(s.start, always_hours=False)} --> {timestamp(s.end, always_hours=False)}\n"
        f"{s.text.strip()}\n\n" for s in transcript.segments)


def render_tsv(transcript, **_):
    rows = [f"{round(s.start * 1000)}\t{round(s.end * 1000)}\t{s.text.strip()}"
            for s in transcript.segments]
    return "start\tend\ttext\n" + "".join(r + "\n" for r in rows)


def render_json(transcript, model, params):
    """whisper.cpp's JSON layout (`-oj`, with the token ids of `-ojf`)."""
    hp = model.hparams
    tok = model.tokenizer

    def times(s):
        return {"timestamps": {"from": timestamp(s.start, True), "to": timestamp(s.end, True)},
                "offsets": {"from": round(s.start * 1000), "to": round(s.end * 1000)}}

    record = {
        "systeminfo": "dasllama",
        "model": {"type": model.size_name, "multilingual": tok.multilingual, "vocab": hp.n_vocab,
                  "audio": {"ctx": hp.n_audio_ctx, "state": hp.n_audio_state,
                            "head": hp.n_audio_head, "layer": hp.n_audio_layer},
                  "text": {"ctx": hp.n_text_ctx, "state": hp.n_text_state,
                           "head": hp.n_text_head, "layer": hp.n_text_layer},
                  "mels": hp.n_mels, "ftype": model.ftype},
        "params": params,
        "result": {"language": transcript.language},
        "transcription": [{**times(s), "text": s.text,
                           "tokens": [{"text": tok.token_text(t), "id": t} for t in s.tokens]}
                          for s in transcript.segments],
    }
    return json.dumps(record, ensure_ascii=False, indent=2) + "\n"


RENDER = {"txt": render_txt, "srt": render_srt, "vtt": render_vtt, "json": render_json,
          "tsv": render_tsv}
