"""The VITS network of a Piper voice, in numpy over BLAS: text encoder, stochastic duration
predictor (reversed), length regulation, prior sampling, reversed coupling flow, HiFi-GAN.

Arrays are (channels, frames) for one utterance; names follow the PyTorch modules the ONNX
export kept (`enc_p`, `dp`, `flow`, `dec`). Paddings, dilations and strides are read from the
graph's Conv nodes (see `Convs`), not assumed.
"""
import math
from dataclasses import dataclass

import numpy as np

from dasllama.kernels import amx
from dasllama.kernels.tts.conv import conv1d_tiled, tiled
from dasllama.kernels.tts import conv_amx
from dasllama.kernels.tts.conv_amx import TimeMajorTaps, out_buffer, conv_time_major, conv_transpose_time_major, polyphase_taps
from dasllama.kernels.tts.ops import conv1d, conv_taps, conv_transpose1d, gelu, layer_norm, leaky_relu, rq_spline_inverse


# Latent frames of context either side of a decoder chunk: more than HiFi-GAN's receptive
# field (conv_pre 3 frames, the upsampling convs ~1, the resblocks ~6.5 at 8 samples per
# frame and less after), so the cropped chunks join into exactly the whole decode.
DECODE_HALO = 16
MIN_CHUNK = 32
RESBLOCK_TILE = 4096       # samples per tile of a decoder stage's resblocks (2048-16384 within noise)


class VitsError(ValueError):
    """The ONNX file is not a VITS voice this engine can run."""


@dataclass
class Conv:
    weight: np.ndarray     # conv: taps (K, C_out, C_in / groups); ConvTranspose: (C_in, C_out, K)
    bias: np.ndarray       # (C_out,) or None
    pads: tuple            # (left, right)
    dilation: int
    stride: int
    groups: int
    transpose: bool
    time_major: TimeMajorTaps = None    # the taps split for the bf16 tiles, where AMX runs this conv

    def __call__(self, x, slope=1.0, residual=None, pool=None, n_parts=1, time_major=False, out=None,
                 accumulate=False):
        """residual + conv(leaky_relu(x, slope)); x (C_in, T), or (T, C_in) time_major with the
        result (T', C_out). Convs with time_major taps run on the bf16 tiles; other dense convs
        on the register tiles (kernels/tts/conv.py) with the activation and the residual fused;
        their work split in n_parts on `pool` when one is given. out, accumulate: time-major,
        conv_time_major's."""
        if self.time_major is not None:
            if not time_major:
                out = self(x.T, slope, None if residual is None else residual.T, pool, n_parts, True)
                return out.T
            if self.transpose:
                n_out = (x.shape[0] - 1) * self.stride + self.weight.shape[2] - sum(self.pads)
                return conv_transpose_time_major(x, self.time_major, self.stride, self.pads[0], n_out, slope,
                                                 pool, n_parts)
            return conv_time_major(x, self.time_major, self.pads, self.dilation, slope, residual, pool, n_parts,
                                   out, accumulate)
        if not self.transpose and tiled(self.weight, self.groups):
            return conv1d_tiled(x, self.weight, self.bias, self.pads, self.dilation, slope, residual,
                                pool, n_parts)
        if slope != 1.0:
            x = leaky_relu(x, slope)
        if self.transpose:
            out = conv_transpose1d(x, self.weight, self.bias, self.stride, self.pads[0])
        else:
            out = conv1d(x, self.weight, self.bias, self.pads, self.dilation, self.groups)
        return out if residual is None else out + residual


def _module_name(node, weights):
    """The PyTorch module a conv node belongs to: its bias or weight name minus the suffix
    (the export anonymises weight-normed weights as onnx::Conv_N but keeps bias names)."""
    for name in node.inputs[1:3][::-1]:
        for suffix in (".bias", ".weight"):
            if name.endswith(suffix) and name in weights:
                return name[: -len(suffix)]
    return None


def read_convs(onnx_model):
    """{module name: Conv} for every Conv / ConvTranspose node of the graph."""
    convs = {}
    for node in onnx_model.nodes:
        if node.op not in ("Conv", "ConvTranspose"):
            continue
        name = _module_name(node, onnx_model.weights)
        if name is None:
            continue
        a = node.attrs
        bias = onnx_model.weights.get(node.inputs[2]) if len(node.inputs) > 2 else None
        pads = tuple(a.get("pads", [0, 0]))
        weight = onnx_model.weights[node.inputs[1]].astype(np.float32)
        convs[name] = Conv(weight if node.op == "ConvTranspose" else conv_taps(weight),
                           None if bias is None else bias.astype(np.float32),
                           pads, a.get("dilations", [1])[0], a.get("strides", [1])[0],
                           a.get("group", 1), node.op == "ConvTranspose")
    return convs


def split_for_tiles(convs, passes, scale=1.0):
    """Give the dense and transposed convs their time-major bf16 taps with this pass list (the
    decoder runs on them where AMX-BF16 is granted), the weights times `scale`."""
    for conv in convs:
        if conv.groups != 1:
            continue
        if conv.transpose:
            conv.time_major = TimeMajorTaps(polyphase_taps(conv.weight * np.float32(scale), conv.stride),
                                            None if conv.bias is None else np.tile(conv.bias, conv.stride), passes)
        else:
            conv.time_major = TimeMajorTaps(conv.weight * np.float32(scale), conv.bias, passes)


def _lookup_table(onnx_model, graph_input):
    """The initializer a Gather node indexes with a graph input (the phoneme or speaker id)."""
    for node in onnx_model.consumers("Gather", graph_input):
        if node.inputs[1] == graph_input and node.inputs[0] in onnx_model.weights:
            return onnx_model.weights[node.inputs[0]].astype(np.float32)
    return None


def _affine_scale(onnx_model, mean_name):
    """exp(-logs) of the duration predictor's ElementwiseAffine: the export folds it into the
    constant that multiplies (z - m)."""
    for sub in onnx_model.consumers("Sub", mean_name):
        for mul in onnx_model.consumers("Mul", sub.outputs[0]):
            other = [n for n in mul.inputs if n != sub.outputs[0]][0]
            if other in onnx_model.weights:
                return onnx_model.weights[other].astype(np.float32)
    raise VitsError(f"{onnx_model.path}: the duration predictor's affine scale is not in the graph.")


def _count(convs, fmt):
    n = 0
    while fmt.format(n) in convs:
        n += 1
    return n


class Vits:
    """The network's weights and its inference, built from a read ONNX model."""

    def __init__(self, onnx_model):
        self.convs = read_convs(onnx_model)
        w = onnx_model.weights
        self.emb = _lookup_table(onnx_model, "input")             # (n_symbols, hidden)
        self.emb_g = _lookup_table(onnx_model, "sid") if "sid" in onnx_model.inputs else None
        if self.emb is None or "enc_p.proj" not in self.convs or "dec.conv_pre" not in self.convs:
            raise VitsError(f"{onnx_model.path} is an ONNX model but not a VITS voice "
                            "(no text encoder or HiFi-GAN decoder in its graph).")
        self.hidden = self.emb.shape[1]
        self.n_layers = _count(self.convs, "enc_p.encoder.attn_layers.{}.conv_q")
        self.rel_k = [w[f"enc_p.encoder.attn_layers.{i}.emb_rel_k"][0] for i in range(self.n_layers)]
        self.rel_v = [w[f"enc_p.encoder.attn_layers.{i}.emb_rel_v"][0] for i in range(self.n_layers)]
        self.n_heads = self.hidden // self.rel_k[0].shape[1]
        for i in range(self.n_layers):   # the export pads the FFN's input with a Pad node
            for c in ("conv_1", "conv_2"):
                conv = self.convs[f"enc_p.encoder.ffn_layers.{i}.{c}"]
                k = conv.weight.shape[0]
                conv.pads = ((k - 1) // 2, k // 2)
        self.norms = {k[: -len(".gamma")]: (w[k].astype(np.float32), w[k[:-6] + ".beta"].astype(np.float32))
                      for k in w if k.endswith(".gamma")}
        self.dp_flows = sorted((int(k.split(".")[2]) for k in self.convs
                                if k.startswith("dp.flows.") and k.endswith(".pre")), reverse=True)
        self.dp_mean = w["dp.flows.0.m"].astype(np.float32)[:, 0]                  # (2,)
        self.dp_scale = _affine_scale(onnx_model, "dp.flows.0.m")[:, 0]            # (2,)
        self.flows = sorted((int(k.split(".")[2]) for k in self.convs
                             if k.startswith("flow.flows.") and k.endswith(".pre")), reverse=True)
        self.n_wn = _count(self.convs, f"flow.flows.{self.flows[0]}.enc.in_layers.{{}}")
        self.n_ups = _count(self.convs, "dec.ups.{}")
        self.n_kernels = _count(self.convs, "dec.resblocks.{}.convs.0") // self.n_ups \
            or _count(self.convs, "dec.resblocks.{}.convs1.0") // self.n_ups
        # HiFi-GAN time-major on AMX-BF16 tiles where granted (kernels/tts/conv_amx.py)
        self.time_major = amx.BF16
        if self.time_major:        # not the encoder's and duration predictor's: durations are exact
            split_for_tiles((c for name, c in self.convs.items() if name.startswith("dec.")), conv_amx.PASSES)
            for name in [f"dec.ups.{i}" for i in range(1, self.n_ups)] + ["dec.conv_post"]:
                split_for_tiles([self.convs[name]], conv_amx.PASSES, 1.0 / self.n_kernels)   # resblock_sums
            # the flow's WaveNet in_layers (k 5, ~85 % of its products) take three passes; its
            # other convs, the encoder's and the duration predictor's keep six. Verify on the
            # bench's 20 sentences: max |diff| 1.97e-5-1.61e-4 against 1.69e-5-1.01e-4 with six
            # throughout (bound 2e-4); three in the whole flow 3.3e-4, in the encoder 6.0e-4.
            split_for_tiles((c for name, c in self.convs.items() if ".in_layers." in name and name.startswith("flow.")),
                            amx.PASSES_2)
            split_for_tiles((c for name, c in self.convs.items() if name.startswith(("flow.", "enc_p.", "dp."))
                             and c.time_major is None), amx.PASSES_3)

    def norm(self, name, x):
        gamma, beta = self.norms[name]
        return layer_norm(x, gamma, beta)

    # -- text encoder -----------------------------------------------------------------------

    def attention(self, i, x, par):
        """x + multi-head self-attention with windowed relative positions (keys and values);
        par: the pool and parts the projections split their output channels in."""
        p = f"enc_p.encoder.attn_layers.{i}"
        q, k, v = (self.convs[f"{p}.conv_{c}"](x, **par) for c in "qkv")
        n_ctx, head_dim = x.shape[1], self.hidden // self.n_heads
        rel_k, rel_v = self.rel_k[i], self.rel_v[i]                # (2 * window + 1, head_dim)
        window = rel_k.shape[0] // 2
        rows = np.arange(n_ctx)[:, None]
        cols = rows + np.arange(-window, window + 1)[None, :]      # (n_ctx, 2w+1): key index j
        valid = (cols >= 0) & (cols < n_ctx)
        cols_c = np.clip(cols, 0, n_ctx - 1)
        out = np.empty_like(q)
        for h in range(self.n_heads):
            sl = slice(h * head_dim, (h + 1) * head_dim)
            qh = q[sl].T / math.sqrt(head_dim)                     # (n_ctx, head_dim)
            scores = qh @ k[sl]                                    # (n_ctx, n_ctx)
            rel = qh @ rel_k.T                                     # (n_ctx, 2w+1): by j - i
            np.add.at(scores, (np.broadcast_to(rows, cols.shape)[valid], cols[valid]), rel[valid])
            scores -= scores.max(axis=1, keepdims=True)
            probs = np.exp(scores)
            probs /= probs.sum(axis=1, keepdims=True)
            oh = probs @ v[sl].T                                   # (n_ctx, head_dim)
            band = np.where(valid, probs[rows, cols_c], 0.0)       # (n_ctx, 2w+1)
            out[sl] = (oh + band @ rel_v).T
        return self.convs[p + ".conv_o"](out, residual=x, **par)

    def ffn(self, i, x, par):
        """x + conv_2(relu(conv_1(x))) (the ReLU as a leaky one of slope 0)."""
        p = f"enc_p.encoder.ffn_layers.{i}"
        return self.convs[p + ".conv_2"](self.convs[p + ".conv_1"](x, **par), 0.0, residual=x, **par)

    def encode(self, ids, pool=None, n_parts=1):
        """Phoneme ids -> (hidden states, prior mean, prior log-std), each (channels, n_ids);
        the encoder's convs split their output channels in n_parts on `pool` when given."""
        par = {"pool": pool, "n_parts": n_parts}
        x = (self.emb[ids] * math.sqrt(self.hidden)).T             # (hidden, n_ids)
        for i in range(self.n_layers):
            x = self.norm(f"enc_p.encoder.norm_layers_1.{i}", self.attention(i, x, par))
            x = self.norm(f"enc_p.encoder.norm_layers_2.{i}", self.ffn(i, x, par))
        stats = self.convs["enc_p.proj"](x)
        half = stats.shape[0] // 2
        return x, stats[:half], stats[half:]

    # -- stochastic duration predictor, reversed ----------------------------------------------

    def dds_conv(self, prefix, x, cond=None):
        """Dilated depth-separable convolutions with layer norms and GELU, residual."""
        if cond is not None:
            x = x + cond
        for i in range(_count(self.convs, prefix + ".convs_sep.{}")):
            y = self.convs[f"{prefix}.convs_sep.{i}"](x)
            y = gelu(self.norm(f"{prefix}.norms_1.{i}", y))
            y = self.convs[f"{prefix}.convs_1x1.{i}"](y)
            x = x + gelu(self.norm(f"{prefix}.norms_2.{i}", y))
        return x

    def conv_flow(self, i, z, cond):
        """A neural-spline coupling layer, inverted: z[1] through the spline z[0] predicts."""
        p = f"dp.flows.{i}"
        pre = self.convs[p + ".pre"]
        h = self.convs[p + ".proj"](self.dds_conv(p + ".convs", pre(z[:1]), cond))
        n_bins = (h.shape[0] + 1) // 3
        h = h.T                                                    # (n_ids, 3 * n_bins - 1)
        scale = math.sqrt(pre.weight.shape[1])
        z1 = rq_spline_inverse(z[1], h[:, :n_bins] / scale, h[:, n_bins:2 * n_bins] / scale,
                               h[:, 2 * n_bins:])
        return np.stack([z[0], z1])

    def log_durations(self, x, noise_w, g=None, rng=None):
        """(n_ids,) log durations in frames, from the encoder's hidden states."""
        h = self.convs["dp.pre"](x)
        if g is not None:
            h = h + self.convs["dp.cond"](g)
        h = self.convs["dp.proj"](self.dds_conv("dp.convs", h))
        z = np.zeros((2, x.shape[1]), np.float32)
        if noise_w:
            z = (rng.standard_normal(z.shape) * noise_w).astype(np.float32)
        for i in self.dp_flows:                                    # Flip, ConvFlow, ... per flow
            z = self.conv_flow(i, z[::-1], h)
        z = z[::-1]
        z = (z - self.dp_mean[:, None]) * self.dp_scale[:, None]   # ElementwiseAffine, inverted
        return z[0]

    # -- flow and decoder --------------------------------------------------------------------

    def wavenet(self, prefix, x, g, par):
        """The coupling layers' non-causal WaveNet: gated tanh-sigmoid units, skip sum."""
        cond = self.convs[prefix + ".cond_layer"](g) if g is not None else None
        out = np.zeros_like(x)
        hidden = x.shape[0]
        for i in range(self.n_wn):
            a = self.convs[f"{prefix}.in_layers.{i}"](x, **par)
            if cond is not None:
                a = a + cond[i * 2 * hidden:(i + 1) * 2 * hidden]
            acts = np.tanh(a[:hidden]) * (1.0 / (1.0 + np.exp(-a[hidden:])))
            rs = self.convs[f"{prefix}.res_skip_layers.{i}"](acts, **par)
            if i < self.n_wn - 1:
                x = x + rs[:hidden]
                out += rs[hidden:]
            else:
                out += rs
        return out

    def flow_reverse(self, z, g=None, pool=None, n_parts=1):
        """The mean-only residual coupling flow run backwards (prior -> posterior latent);
        its convs split their output channels in n_parts on `pool` when one is given."""
        par = {"pool": pool, "n_parts": n_parts}
        for i in self.flows:
            z = z[::-1]
            half = z.shape[0] // 2
            p = f"flow.flows.{i}"
            h = self.wavenet(p + ".enc", self.convs[p + ".pre"](z[:half], **par), g, par)
            z = np.concatenate([z[:half], z[half:] - self.convs[p + ".post"](h, **par)])
        return z

    def resblock(self, j, x, out=None, accumulate=False):
        """Resblock j on x; time-major, its last conv writes into out (added to it where
        accumulate)."""
        p = f"dec.resblocks.{j}"
        tm = self.time_major
        if p + ".convs.0" in self.convs:                           # ResBlock2
            n = _count(self.convs, p + ".convs.{}")
            for c in range(n):
                last = {"out": out, "accumulate": accumulate} if tm and c == n - 1 else {}
                x = self.convs[f"{p}.convs.{c}"](x, 0.1, residual=x, time_major=tm, **last)
            return x
        n = _count(self.convs, p + ".convs1.{}")
        for c in range(n):                                         # ResBlock1
            last = {"out": out, "accumulate": accumulate} if tm and c == n - 1 else {}
            y = self.convs[f"{p}.convs1.{c}"](x, 0.1, time_major=tm)
            x = self.convs[f"{p}.convs2.{c}"](y, 0.1, residual=x, time_major=tm, **last)
        return x

    def resblock_reach(self, j):
        """Samples of context either side that resblock j reads (its convs' half-widths)."""
        p = f"dec.resblocks.{j}."
        return sum(c.dilation * (c.weight.shape[0] - 1) // 2
                   for name, c in self.convs.items() if name.startswith(p))

    def resblocks(self, i, x):
        """The mean of stage i's resblocks, over tiles of RESBLOCK_TILE samples with their
        reach of context, so each tile's passes stay in cache (the last stage's activations
        are ~13 MB for a 5 s sentence); the crops join into the untiled result. x (C, T), or
        (T, C) time-major: there the sum, each resblock's last conv adding into it, and the
        next convs' weights divided by n_kernels (leaky ReLU commutes with a positive scale)."""
        js = range(i * self.n_kernels, (i + 1) * self.n_kernels)
        reach = max(self.resblock_reach(j) for j in js)
        if self.time_major:
            return self.resblock_sums(js, reach, x)
        n = x.shape[1]
        out = np.empty(x.shape, np.float32)
        for a in range(0, n, RESBLOCK_TILE):
            b = min(n, a + RESBLOCK_TILE)
            lo, hi = max(0, a - reach), min(n, b + reach)
            tile = np.ascontiguousarray(x[:, lo:hi])
            xs = self.resblock(js[0], tile)
            for j in js[1:]:
                xs += self.resblock(j, tile)
            out[:, a:b] = xs[:, a - lo:b - lo]
        out /= self.n_kernels
        return out

    def resblock_sums(self, js, reach, x):
        """resblocks' tiles time-major: x (T, C) -> the sum of resblocks js, each tile's
        resblocks written into one buffer by their last convs."""
        n = x.shape[0]
        out = np.empty(x.shape, np.float32)
        last = self.convs[f"dec.resblocks.{js[0]}.convs.1"] if f"dec.resblocks.{js[0]}.convs.1" in self.convs \
            else self.convs[f"dec.resblocks.{js[0]}.convs2.0"]
        for a in range(0, n, RESBLOCK_TILE):
            b = min(n, a + RESBLOCK_TILE)
            lo, hi = max(0, a - reach), min(n, b + reach)
            tile = x[lo:hi]
            sums = out_buffer(hi - lo, last.time_major)
            for k, j in enumerate(js):
                self.resblock(j, tile, sums, accumulate=k > 0)
            out[a:b] = sums[a - lo:b - lo, :x.shape[1]]
        return out

    def decode(self, z, g=None):
        """HiFi-GAN: latent frames (channels, n_frames) -> waveform (n_frames * hop,)."""
        if self.time_major:
            return self.decode_time_major(z, g)
        x = self.convs["dec.conv_pre"](z)
        if g is not None:
            x = x + self.convs["dec.cond"](g)
        for i in range(self.n_ups):
            x = self.resblocks(i, self.convs[f"dec.ups.{i}"](x, 0.1))
        return np.tanh(self.convs["dec.conv_post"](x, 0.01))[0]

    def decode_time_major(self, z, g=None):
        """decode with the activations (samples, channels), the convs on the bf16 tiles."""
        x = self.convs["dec.conv_pre"](np.ascontiguousarray(z.T), time_major=True)
        if g is not None:
            x = x + self.convs["dec.cond"](np.ascontiguousarray(g.T), time_major=True)
        for i in range(self.n_ups):
            x = self.resblocks(i, self.convs[f"dec.ups.{i}"](x, 0.1, time_major=True))
        return np.tanh(self.convs["dec.conv_post"](x, 0.01, time_major=True)[:, 0])

    # -- the whole utterance -----------------------------------------------------------------

    def speaker(self, sid):
        if self.emb_g is None:
            return None
        return self.emb_g[sid][:, None]                            # (gin, 1)

    def durations(self, ids, length_scale=1.0, noise_w=0.8, sid=0, rng=None, pool=None, n_parts=1):
        """(encoder outputs, integer frame count per id), the part before the waveform."""
        ids = np.asarray(ids, dtype=np.int64)
        g = self.speaker(sid)
        x, m_p, logs_p = self.encode(ids, pool, n_parts)
        logw = self.log_durations(x, noise_w, g, rng)
        frames = np.ceil(np.exp(logw) * length_scale).astype(np.int64)
        return (m_p, logs_p), frames

    def latent_to_audio(self, z_p, g=None, pool=None, n_chunks=1):
        """flow_reverse, its convs' output channels split over `pool` (the kernels and numpy
        release the GIL), then decode over n_chunks spans of frames at once on it, each with
        DECODE_HALO frames of context and cropped, so the spans join into the whole
        utterance's waveform (the flow's ~500-frame products split well by channel; the
        decoder's 32-128-channel ones split better by time)."""
        n_frames = z_p.shape[1]
        n_chunks = max(1, min(n_chunks, n_frames // MIN_CHUNK))
        if pool is None or n_chunks == 1:
            return self.decode(self.flow_reverse(z_p, g), g)
        z = self.flow_reverse(z_p, g, pool, n_chunks)
        hop = int(np.prod([self.convs[f"dec.ups.{i}"].stride for i in range(self.n_ups)]))
        bounds = np.linspace(0, n_frames, n_chunks + 1).astype(int)

        def chunk(i):
            a, b = bounds[i], bounds[i + 1]
            d_lo, d_hi = max(0, a - DECODE_HALO), min(n_frames, b + DECODE_HALO)
            wav = self.decode(np.ascontiguousarray(z[:, d_lo:d_hi]), g)
            return wav[(a - d_lo) * hop:(b - d_lo) * hop]
        return np.concatenate(list(pool.map(chunk, range(n_chunks))))

    def infer(self, ids, noise_scale=0.667, length_scale=1.0, noise_w=0.8, sid=0, seed=None,
              pool=None, n_chunks=1):
        """Phoneme ids -> float32 waveform in [-1, 1] at the voice's rate; the decoder runs in
        n_chunks pieces on `pool` when one is given (flow and decoder)."""
        rng = np.random.default_rng(seed)
        g = self.speaker(sid)
        (m_p, logs_p), frames = self.durations(ids, length_scale, noise_w, sid, rng, pool, n_chunks)
        if frames.sum() == 0:                                      # VITS clamps to one frame
            m_p, logs_p, frames = m_p[:, :1] * 0, logs_p[:, :1] * 0, np.ones(1, np.int64)
        m = np.repeat(m_p, frames, axis=1)                         # (channels, n_frames)
        z_p = m
        if noise_scale:
            noise = rng.standard_normal(m.shape).astype(np.float32)
            z_p = m + noise * np.exp(np.repeat(logs_p, frames, axis=1)) * noise_scale
        z_p = np.ascontiguousarray(z_p, dtype=np.float32)
        return self.latent_to_audio(z_p, g, pool, n_chunks).astype(np.float32)
