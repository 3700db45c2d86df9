"""Lanes, the thread count of each decode step: it follows the faster count, comes back to the
team when the machine frees up, and the count never changes a logit."""
import numpy as np
import pytest

from dasllama.core import Model
from dasllama.core.runtime.threads import Lanes


def drive(lanes, step_time, n_steps):
    """Run n_steps through `lanes` with step_time(step, threads) as each step's seconds; the
    counts it picked."""
    picked = []
    for i in range(n_steps):
        n = lanes.pick()
        lanes.record(n, step_time(i, n))
        picked.append(n)
    return picked


def test_a_loaded_machine_moves_the_step_to_one_thread():
    picked = drive(Lanes(2), lambda i, n: 0.6 if n == 2 else 0.06, 200)
    assert picked[:3] == [2, 2, 1]                          # the first probe wins
    twos = [i for i, n in enumerate(picked) if n == 2][2:]  # the team's probes from then on
    assert len(twos) <= 5 and (np.diff(np.diff(twos)) > 0).all()    # ever more rarely


def test_a_quiet_machine_keeps_the_team_and_probes_ever_more_rarely():
    lanes = Lanes(2)
    picked = drive(lanes, lambda i, n: 0.008 if n == 2 else 0.014, 2000)
    ones = [i for i, n in enumerate(picked) if n == 1]
    assert ones[0] == 2 and len(ones) < 12
    gaps = np.diff(ones)
    assert (gaps[1:] >= gaps[:-1]).all() and gaps[-1] == Lanes.PROBE_MAX
    assert lanes.current == 2


def test_a_clear_loss_leaves_the_team_alone_until_it_slows_down():
    # one probe of the single thread in a tg128 (it lost by 1.75x), not one at each doubling
    # gap; then the machine gets busy at step 300 and the team's own times call a probe
    busy_from = 300
    picked = drive(Lanes(2), lambda i, n: (0.008 if n == 2 else 0.014) if i < busy_from else
                   (0.6 if n == 2 else 0.06), 320)
    assert [i for i, n in enumerate(picked[:busy_from]) if n == 1] == [2, 2 + Lanes.PROBE_MAX]
    assert picked[busy_from + Lanes.KEEP:].count(1) >= 20 - Lanes.KEEP - 1


def test_the_team_comes_back_when_the_machine_frees_up():
    busy_until = 100
    picked = drive(Lanes(2), lambda i, n: (0.6 if n == 2 else 0.06) if i < busy_until else
                   (0.008 if n == 2 else 0.014), 400)
    assert picked[busy_until - 10:busy_until].count(1) >= 9
    assert picked[-50:].count(2) >= 49


def test_one_thread_has_nothing_to_choose():
    assert drive(Lanes(1), lambda i, n: 1.0, 50) == [1] * 50


class Fixed(Lanes):
    def __init__(self, n_max, n):
        super().__init__(n_max)
        self.n = n

    def pick(self):
        return self.n


@pytest.mark.parametrize("arch,qtype", [("llama", "Q8_0"), ("gemma3", "Q4_K")])
def test_the_thread_count_never_changes_a_logit(tiny_model, arch, qtype):
    """Decode steps on one thread of a model of two give the team's logits bit for bit
    (attention's split-KV shape follows the model's n_threads, not the live count)."""
    model = Model(tiny_model(arch, qtype), n_ctx=128, n_threads=2, quiet=True)
    steps = 40 if arch == "gemma3" else 8      # gemma3's window is 32: cross it
    runs = []
    for n in (2, 1):
        model.lanes = Fixed(2, n)
        model.reset()
        logits = [model.eval([1, 5, 9, 13])]
        for _ in range(steps):
            logits.append(model.eval([int(np.argmax(logits[-1]))]))
        runs.append(logits)
    for a, b in zip(*runs):
        assert np.array_equal(a, b)
