"""Option types every subcommand shares: numbers that must be finite, and thread counts
bounded by the pool numba can start."""
import math
import os

import click


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and inf (which compare false to any bound)."""

    name = "number"

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value} is not a finite number.", param, ctx)
        return number


def max_threads():
    """numba's pool size: NUMBA_NUM_THREADS, else the CPU count (what numba starts)."""
    try:
        return max(1, int(os.environ.get("NUMBA_NUM_THREADS") or os.cpu_count() or 1))
    except ValueError:
        return os.cpu_count() or 1


THREADS = click.IntRange(1, max_threads())
