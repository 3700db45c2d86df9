"""Stop strings over streamed text: text that may be the start of a stop string is held back
until it is known not to be one, so a stream never shows part of a stop string."""


class StopStrings:
    def __init__(self, stops=()):
        self.stops = tuple(s for s in stops if s)
        self.held = ""
        self.hit = None             # the stop string that ended the text, once one has

    def feed(self, text):
        """(text safe to emit now, whether a stop string has been reached)."""
        if not self.stops:
            return text, False
        self.held += text
        found = [(self.held.find(s), s) for s in self.stops if s in self.held]
        if found:
            at, self.hit = min(found)
            safe, self.held = self.held[:at], ""
            return safe, True
        keep = max((n for s in self.stops for n in range(1, len(s)) if self.held.endswith(s[:n])),
                   default=0)
        safe, self.held = self.held[:len(self.held) - keep], self.held[len(self.held) - keep:]
        return safe, False

    def flush(self, tail=""):
        """What is left at the end of the text (no stop string came)."""
        safe, hit = self.feed(tail)
        if hit:
            return safe
        rest, self.held = self.held, ""
        return safe + rest
