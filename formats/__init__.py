"""Reading files: GGUF, whisper.cpp bins, CTranslate2 dirs, audio."""


def shown(name, limit=60):
    """A name read from a file, as an error message may quote it: printable and short (in a
    corrupt file it is garbage, and could break the one-line message)."""
    text = name if name.isprintable() else repr(name)[1:-1]
    text = text if len(text) <= limit else text[:limit] + "..."
    return f"'{text}'"
