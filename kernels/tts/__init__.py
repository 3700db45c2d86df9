"""Speech-out kernels (Piper VITS): 1-D convolutions over BLAS, the duration predictor's
rational-quadratic spline, and the element-wise activations."""
