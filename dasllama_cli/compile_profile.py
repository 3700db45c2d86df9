"""Where a cold start's seconds go: run a dasllama command under a numba compile listener and
print, per compiled function and signature, its own compile seconds (callees' compiles are
subtracted from their caller's, so the column sums to the total). A developer tool beside the CLI it runs (core never imports the CLI).

    NUMBA_CACHE_DIR=$(mktemp -d) python -m dasllama_cli.compile_profile generate -n 64 "Once upon a time"
"""
import sys
import time

from numba.core import event


class _CompileTimer(event.Listener):
    """Exclusive wall seconds per `numba:compile` event (a compile nests its callees')."""

    def __init__(self):
        self.stack = []      # [name, start, child seconds]
        self.rows = []       # (name, signature, own seconds, total seconds)

    def on_start(self, ev):
        self.stack.append([ev.data["dispatcher"].py_func.__qualname__, time.perf_counter(), 0.0])

    def on_end(self, ev):
        name, start, children = self.stack.pop()
        total = time.perf_counter() - start
        if self.stack:
            self.stack[-1][2] += total
        self.rows.append((name, str(ev.data.get("args", "")), total - children, total))


def main(argv):
    from dasllama_cli.main import cli
    timer = _CompileTimer()
    event.register("numba:compile", timer)
    start = time.perf_counter()
    try:
        cli.main(argv, standalone_mode=False)
    finally:
        wall = time.perf_counter() - start
        rows = sorted(timer.rows, key=lambda r: -r[2])
        print(f"\n{'own s':>7} {'incl s':>7}  function [signature]", file=sys.stderr)
        for name, sig, own, total in rows:
            print(f"{own:7.2f} {total:7.2f}  {name} {sig[:90]}", file=sys.stderr)
        print(f"{sum(r[2] for r in rows):7.2f}          compiling, of {wall:.1f} s wall "
              f"({len(rows)} compiles)", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
