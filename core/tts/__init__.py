"""Speech out: Piper VITS voices run on the engine's own ops.

    from dasllama.core.tts import load_voice, synthesize
    voice = load_voice("en_US-joe-medium.onnx")
    for rate, samples in synthesize("Hello there.", voice):
        ...
"""
