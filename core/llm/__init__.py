"""Text LLMs from GGUF files: the model and its forward pass, families, tokenizers, sampling, chat, generation."""
