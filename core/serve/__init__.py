"""`dasllama serve`: an OpenAI-compatible HTTP API over the engine (engine.py: the engine
thread and its sequences; app.py: the routes; chat.py: messages and tools as prompts;
audio.py: Whisper and Piper behind their own workers)."""
