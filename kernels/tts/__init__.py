"""Speech-out kernels: 1-D convolutions on register tiles (conv.py) with the BLAS ones beside
them for what the tiles do not take, the duration predictor's rational-quadratic spline and
the element-wise activations (ops.py) for Piper's VITS; the exact int8 products of Kokoro's
quantised graph on vpdpbusd tiles (intdot.py) and its LSTM's recurrence (lstm.py)."""
