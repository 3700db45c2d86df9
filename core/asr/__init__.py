"""Whisper speech-to-text: front end, encoder, decoder, decoding rules, tokenizer, output writers."""
