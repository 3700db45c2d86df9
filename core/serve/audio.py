"""Speech in and out for the server: Whisper transcriptions and Piper speech, each model on a
worker thread of its own (one request at a time per model, beside the LLM's engine thread)."""
import io
import json
import wave
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from dasllama.formats.audio import load as load_audio

from ..asr.decode import DecodeOptions, transcribe
from ..asr.model import WhisperModel
from ..asr.writers import render_srt, render_vtt
from ..tts import load_voice, synthesize, to_int16

TRANSCRIPTION_FORMATS = ("json", "text", "srt", "vtt", "verbose_json")


def _worker(n_threads):
    def init():
        import numba
        numba.set_num_threads(n_threads)    # numba's pool size is per calling thread
    return ThreadPoolExecutor(1, initializer=init)


class Transcriber:
    def __init__(self, path, n_threads=None):
        self.model = WhisperModel(path, n_threads=n_threads)
        self.worker = _worker(self.model.n_threads)

    def run(self, data, name, response_format="json", language=None, temperature=None):
        """(media type, body) of one transcription, as OpenAI's API renders it."""
        samples = load_audio(data, name=name)
        opts = DecodeOptions(language=language)
        if temperature is not None:
            opts.temperatures = (float(temperature),)
        transcript = transcribe(self.model, samples, opts)
        text = transcript.text.strip()
        if response_format == "text":
            return "text/plain; charset=utf-8", text + "\n"
        if response_format == "srt":
            return "text/plain; charset=utf-8", render_srt(transcript)
        if response_format == "vtt":
            return "text/vtt; charset=utf-8", render_vtt(transcript)
        if response_format == "verbose_json":
            segments = [{"id": i, "seek": 0, "start": s.start, "end": s.end, "text": s.text,
                         "tokens": s.tokens, "temperature": s.temperature,
                         "avg_logprob": s.avg_logprob, "compression_ratio": s.compression_ratio,
                         "no_speech_prob": s.no_speech_prob}
                        for i, s in enumerate(transcript.segments)]
            body = {"task": "transcribe", "language": transcript.language,
                    "duration": transcript.duration, "text": text, "segments": segments}
            return "application/json", json.dumps(body, ensure_ascii=False)
        return "application/json", json.dumps({"text": text}, ensure_ascii=False)


class Speaker:
    def __init__(self, path, n_threads=None):
        self.voice = load_voice(path, n_threads=n_threads)
        self.worker = _worker(self.voice.n_threads)

    def run(self, text, response_format="wav", speed=1.0, seed=None):
        """(media type, body): a 16-bit mono WAV, or the same samples raw (s16le)."""
        chunks = [samples for _, samples in synthesize(text, self.voice, speed=speed, seed=seed)]
        pcm = to_int16(np.concatenate(chunks) if chunks else np.zeros(0, np.float32)).tobytes()
        if response_format == "pcm":
            return "audio/pcm", pcm
        buffer = io.BytesIO()
        with wave.open(buffer, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(self.voice.sample_rate)
            w.writeframes(pcm)
        return "audio/wav", buffer.getvalue()

