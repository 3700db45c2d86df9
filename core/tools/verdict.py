"""One verdict over many comparisons, shared by verify's LLM and Whisper checks: the worst
verdict found, the exit code (0 parity, 1 a failing verdict), and the one-line summary."""


def overall(results, worst_first):
    """The first of `worst_first` that any result has, else "parity"."""
    for verdict in worst_first:
        if any(r.verdict == verdict for r in results):
            return verdict
    return "parity"


def exit_code(results, failing, strict):
    """1 when a result's verdict is in `failing` (near-ties too when strict), else 0."""
    bad = set(failing) | ({"near-tie"} if strict else set())
    return 1 if any(r.verdict in bad for r in results) else 0


def summary(results, verdicts, code, what):
    """`verify: 2 parity, 1 near-tie of 3 prompts (exit 0)`."""
    counts = {v: sum(r.verdict == v for r in results) for v in verdicts}
    parts = [f"{n} {v}" for v, n in counts.items() if n]
    return f"verify: {', '.join(parts)} of {len(results)} {what} (exit {code})"
