"""Tools apart from the engine: verify and bench against the reference engines (llama.cpp, whisper.cpp), their runners, receipts. The engine imports none of this."""
