"""Screened output logits for Whisper's decode steps: the text rows of an f16 output projection
read as a Q8_0 copy with a bound per row on its error, and refined from f16 wherever a choice
could differ (see Q8Screen)."""
import numpy as np

from dasllama.kernels.actq import ACT_Q8_0
from dasllama.kernels.matmul import quantizer_for
from dasllama.kernels.quants import F16, Q8_0
from dasllama.kernels.speech.screen import contenders, screen_margins

from .linear import KernelLinear


class Q8Screen:
    """The text rows of an f16 output projection kept also as Q8_0 (53 % of the bytes), with a
    bound per row on how far a Q8_0 logit may lie from the f16 kernel's value.

    A decode step reads the Q8_0 rows (`step`); the rows whose bound reaches the best are then
    recomputed from f16 (StepLogits.refine), so every choice the decoder makes from the logits
    is the one the f16 logits give. Bound, for weight block w (amax a) and activation block x
    (amax b, f16 rounding x~): |w - w^| <= a (1/254 + 2^-11) (ggml's Q8_0: d = a/127 rounded to
    f16, q = rint(w 127/a)), |x~ - x^| <= b (0.6/127 + 2^-11), and each fold's float rounding
    <= (n + 16) 2^-24 sum|w x|; per row the worst block of w stands for all of them.
    """

    _SLACK = 1.05

    def __init__(self, f16_linear, n_rows):
        self.f16 = f16_linear.w.view(np.float16).reshape(f16_linear.n_rows, -1)
        n_cols = self.f16.shape[1]
        w = self.f16[:n_rows].astype(np.float32)
        xq, xd = np.empty((n_rows, n_cols), np.int8), np.empty((n_rows, n_cols // 32), np.float32)
        quantizer_for(ACT_Q8_0)(w, xq, xd, xd, w)     # the Q8_0 rows' own quantiser, compiled once
        blocks = np.empty((n_rows, n_cols // 32, 34), np.uint8)
        blocks[:, :, :2] = xd.astype(np.float16).view(np.uint8).reshape(n_rows, -1, 2)
        blocks[:, :, 2:] = xq.view(np.uint8).reshape(n_rows, -1, 32)
        self.q8 = KernelLinear(Q8_0, blocks, n_rows, n_cols)
        wb = np.abs(w).reshape(n_rows, -1, 32)
        err = wb.max(-1) * np.float32(1 / 254 + 2 ** -11)               # (rows, blocks)
        self.w_err = err.max(1).astype(np.float32)
        self.w_l1 = (wb.sum(-1) + 32 * err).max(1).astype(np.float32)
        self.x_err = 0.6 / 127 + 2 ** -11 + 2 * (n_cols + 16) * 2.0 ** -24

    def step(self, x, tail, text=True):
        """StepLogits of one hidden row x (1, n_cols): Q8_0 text rows, then the f16 logits of
        the rows past them from `tail` (a KernelLinear). text=False (the rules will mask the
        text rows): those are -inf, and the screen is not read."""
        n_text = self.w_err.size
        row = np.empty(n_text + tail.n_rows, np.float32)
        row[n_text:] = tail.product(x)[0]
        margin = np.zeros_like(row)
        if not text:
            row[:n_text] = -np.inf
            return StepLogits(row, margin, None)
        row[:n_text] = self.q8.product(x)[0]
        screen_margins(x[0], self.w_err, self.w_l1, np.float32(self.x_err),
                       np.float32(self._SLACK), margin)
        return StepLogits(row, margin, lambda ids: KernelLinear(F16, self.f16[ids], len(ids), x.shape[1]).product(x)[0])


class StepLogits:
    """One decode step's logits `row`, each within `margin` of its exact (f16 kernel) value
    (margin 0: exact already)."""

    def __init__(self, row, margin, exact):
        self.row, self.margin, self._exact = row, margin, exact

    def refine(self, logits, upto):
        """Make exact, in `logits` (a copy of row with some entries -inf), every finite entry
        below `upto` that could be the largest of them: then the largest of them, its value
        and its id are those of exact logits."""
        if self._exact is None:                   # nothing screened: exact already
            return
        ids = contenders(logits[:upto], self.margin[:upto])
        if ids.size:
            exact = self._exact(ids)
            logits[ids] = exact
            self.row[ids] = exact
            self.margin[ids] = 0
