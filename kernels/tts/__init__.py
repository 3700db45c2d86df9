"""Speech-out kernels (Piper VITS): 1-D convolutions on register tiles (conv.py) with the
BLAS ones beside them for what the tiles do not take, the duration predictor's
rational-quadratic spline, and the element-wise activations (ops.py)."""
