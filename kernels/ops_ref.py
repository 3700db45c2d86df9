"""Plain numpy references for kernels/ops.py, in float64 (the tests bound the distance)."""
import numpy as np


def rms_norm_ref(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def rope_ref(x, positions, n_heads, head_dim, n_rot, freq_base, neox):
    x = x.astype(np.float64).reshape(len(positions), n_heads, head_dim).copy()
    half = n_rot // 2
    freqs = freq_base ** (-2.0 * np.arange(half) / n_rot)
    ang = np.asarray(positions, np.float64)[:, None] * freqs[None, :]      # (T, half)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:
        a, b = x[..., :half].copy(), x[..., half:n_rot].copy()
        x[..., :half], x[..., half:n_rot] = a * cos - b * sin, a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2].copy(), x[..., 1:n_rot:2].copy()
        x[..., 0:n_rot:2], x[..., 1:n_rot:2] = a * cos - b * sin, a * sin + b * cos
    return x.reshape(len(positions), n_heads * head_dim)


def gelu_ref(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def silu_ref(x):
    x = x.astype(np.float64)
    return x / (1 + np.exp(-x))


def attention_ref(q, k, v, pos0, n_head, n_head_kv, scale, softcap=0.0, n_swa=0, causal=True):
    """q (T, n_head*hd); k, v (n_kv_tokens, n_head_kv*hd) already f16-rounded, float64 math;
    not causal: every query sees the batch's keys (pos0 + T - 1 and before)."""
    T = q.shape[0]
    hd = q.shape[1] // n_head
    hdv = v.shape[1] // n_head_kv
    group = n_head // n_head_kv
    out = np.zeros((T, n_head * hdv))
    for t in range(T):
        p = pos0 + t
        lo = max(0, p - n_swa + 1) if n_swa > 0 else 0
        hi = p + 1 if causal else pos0 + T
        for h in range(n_head):
            g = h // group
            qh = q[t, h * hd:(h + 1) * hd].astype(np.float64)
            kh = k[lo:hi, g * hd:(g + 1) * hd].astype(np.float64)
            s = kh @ qh * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            w = np.exp(s - s.max())
            w /= w.sum()
            out[t, h * hdv:(h + 1) * hdv] = w @ v[lo:hi, g * hdv:(g + 1) * hdv].astype(np.float64)
    return out
