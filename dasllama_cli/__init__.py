"""The dasllama command line."""
