"""Pick the next token from a logits vector with llama.cpp's default sampler chain.

penalties -> top-k -> top-p -> min-p -> temperature -> dist, as common/sampling.cpp builds it,
each step vectorised over the vocabulary (up to 262144 entries). The draw reproduces llama.cpp's
RNG (std::mt19937 through std::uniform_real_distribution<double>), so a seed that picks a token
there picks the same one here when the probabilities agree.
"""
import secrets
from dataclasses import dataclass, replace
from typing import NamedTuple, Sequence

import numpy as np

LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp's "draw a random seed" (what `--seed -1` becomes)


@dataclass(frozen=True)
class SamplerParams:
    """llama.cpp's defaults, from `common_params_sampling` in common/common.h."""
    temp: float = 0.8            # <= 0 samples greedily
    top_k: int = 40              # <= 0 keeps the whole vocabulary
    top_p: float = 0.95          # 1.0 disables
    min_p: float = 0.05          # 0.0 disables
    repeat_penalty: float = 1.0  # 1.0 disables
    repeat_last_n: int = 64      # 0 disables, -1 means the whole history
    seed: int | None = None      # None (or -1) draws a random seed

    def with_seed(self) -> "SamplerParams":
        """These parameters with the random seed drawn now, so that it can be reported and
        the run repeated; a given seed is kept."""
        if self.seed is not None and self.seed & 0xFFFFFFFF != LLAMA_DEFAULT_SEED:
            return self
        seed = LLAMA_DEFAULT_SEED
        while seed == LLAMA_DEFAULT_SEED:
            seed = secrets.randbits(32)
        return replace(self, seed=seed)


class Candidates(NamedTuple):
    """The tokens still in the running, like llama.cpp's `llama_token_data_array`.

    The order matters: the draw walks the candidates in it. `is_sorted` means by logit, descending.
    """
    ids: np.ndarray     # (n,) int64
    logits: np.ndarray  # (n,) float32
    is_sorted: bool


def penalize_repeats(logits, history, penalty, last_n):
    """Logits with every token seen in the last `last_n` of `history` penalised once.

    Positive logits are divided by the penalty and the others multiplied, so a penalty > 1
    always makes a repeat less likely. `logits` itself is left untouched.
    """
    if penalty == 1.0 or last_n == 0 or len(history) == 0:
        return logits
    recent = history if last_n < 0 else history[-last_n:]
    seen = np.unique(np.asarray(recent, dtype=np.int64))
    out = logits.copy()
    seen_logits = out[seen]
    penalty = np.float32(penalty)
    out[seen] = np.where(seen_logits <= 0, seen_logits * penalty, seen_logits / penalty)
    return out


def top_k(logits, k):
    """The k highest logits, sorted descending (ties by token id); k <= 0 keeps all, unsorted."""
    n_vocab = logits.size
    if k <= 0:
        return Candidates(np.arange(n_vocab), logits, False)
    ids = _top_ids(logits, min(k, n_vocab))
    return _sorted(ids, logits[ids])


def top_p(cands, p):
    """The smallest prefix of the sorted candidates whose probabilities sum to at least p."""
    if p >= 1.0:
        return cands
    n = cands.ids.size
    probs = _softmax(cands.logits)
    if cands.is_sorted:
        order = np.arange(n)
    else:
        # Most mass sits in a few hundred tokens: try those before sorting the whole vocabulary,
        # as llama.cpp does.
        order = _top_ids(cands.logits, min(256, n)) if n > 1024 else np.arange(n)
        order = order[np.lexsort((cands.ids[order], -cands.logits[order]))]
    cumulative = np.cumsum(probs[order], dtype=np.float32)
    if cumulative[-1] < np.float32(p) and order.size < n:
        order = np.argsort(-cands.logits)  # a flat distribution: sort it all (ties in any order)
        cumulative = np.cumsum(probs[order], dtype=np.float32)
    n_keep = min(int(np.searchsorted(cumulative, np.float32(p), side="left")) + 1, order.size)
    kept = order[:n_keep]
    return Candidates(cands.ids[kept], cands.logits[kept], True)


def min_p(cands, p):
    """The candidates whose probability is at least p times the top one's; order is kept."""
    if p <= 0.0 or cands.ids.size == 0:
        return cands
    min_logit = cands.logits.max() + np.log(np.float32(p))
    keep = cands.logits >= min_logit
    return Candidates(cands.ids[keep], cands.logits[keep], cands.is_sorted)


def temperature(cands, temp):
    return Candidates(cands.ids, cands.logits / np.float32(temp), cands.is_sorted)


def draw(cands, uniform):
    """The first candidate, in their order, at which the running probability reaches `uniform`."""
    weights = np.exp(cands.logits - cands.logits.max())
    cumulative = np.cumsum(weights, dtype=np.float64)
    i = int(np.searchsorted(cumulative, cumulative[-1] * uniform, side="left"))
    return int(cands.ids[min(i, cands.ids.size - 1)])


class Sampler:
    """One generation's sampler: the chain's parameters and its random state."""

    def __init__(self, params: SamplerParams = SamplerParams()):
        self.params = params
        seed = LLAMA_DEFAULT_SEED if params.seed is None else params.seed & 0xFFFFFFFF
        self.seed = secrets.randbits(32) if seed == LLAMA_DEFAULT_SEED else seed
        self._rng = _mt19937(self.seed)

    def sample(self, logits: np.ndarray, history: Sequence[int] = ()) -> int:
        """The next token id. `logits` is (n_vocab,); `history` the prompt and generated ids."""
        params = self.params
        logits = np.asarray(logits, dtype=np.float32)
        logits = penalize_repeats(logits, history, params.repeat_penalty, params.repeat_last_n)
        if params.temp <= 0:
            # top-k, top-p and min-p all keep the best token, so greedy is the plain argmax.
            return int(np.argmax(logits))
        cands = top_k(logits, params.top_k)
        cands = top_p(cands, params.top_p)
        cands = min_p(cands, params.min_p)
        cands = temperature(cands, params.temp)
        return draw(cands, _std_uniform(self._rng))


def _top_ids(logits, k):
    """Ids of the k largest logits, in no order."""
    n = logits.size
    if k >= n:
        return np.arange(n)
    # The k-th largest of every 16th logit bounds the k-th largest overall from below, so a cheap
    # pass narrows the full argpartition (2 ms on 262144 logits) to a few hundred values.
    stride = 16
    if n // stride > 4 * k:
        sample = logits[::stride]
        bound = np.partition(sample, sample.size - k)[sample.size - k]
        ids = np.flatnonzero(logits >= bound)
        return ids[np.argpartition(logits[ids], ids.size - k)[ids.size - k:]]
    return np.argpartition(logits, n - k)[n - k:]


def _sorted(ids, logits):
    order = np.lexsort((ids, -logits))
    return Candidates(ids[order], logits[order], True)


def _softmax(logits):
    weights = np.exp(logits - logits.max())
    return weights / weights.sum(dtype=np.float32)


def _mt19937(seed):
    """A numpy MT19937 seeded as `std::mt19937(seed)` is (numpy's legacy seeding is the same)."""
    bitgen = np.random.MT19937()
    bitgen.state = np.random.RandomState(seed).get_state(legacy=False)
    return bitgen


def _std_uniform(bitgen):
    """libstdc++'s `uniform_real_distribution<double>(0, 1)`: two 32-bit draws, low word first."""
    low, high = bitgen.random_raw(2)
    u = (float(low) + float(high) * 2.0**32) / 2.0**64
    return min(u, np.nextafter(1.0, 0.0))
