"""Thread counts and numba's threading layer, for every model the engine runs."""
import os
import sys
import time

# numba picks its threading layer at the first parallel launch in a process. A decode step
# runs tens (Whisper) to hundreds (an LLM) of short parallel regions back to back: libgomp's
# workers spin through the serial gaps between them, tbb's fall asleep and are woken each
# time. tg128 on gemma3-270m Q4_K_M: omp ahead of tbb in 7 of 7 interleaved pairs, +4.5 % on
# average; a Whisper tiny.en step 2.5 -> 2.0 ms (2 cores). Spinning workers would take a core
# from a BLAS pool running beside them, so Whisper's encoder keeps numba's threads out of it.
DECODE_LAYERS = ("omp", "tbb", "workqueue")

# How long libgomp's waiting threads spin before they sleep. Its default, where a team has no
# more threads than the machine has CPUs, is 300000 rounds of `pause` (milliseconds on a
# Sapphire Rapids, whose pause takes ~140 cycles): a thread done with its rows keeps its CPU
# that long at each barrier. Where other processes hold the cores, the OS may then run the
# thread it waits for on the same CPU, and the spinner takes that thread's time. On the shared
# 2-core host of 2026-12-06 (load ~7, in alternated processes), gemma3's decode step on 2 threads
# took 550-1360 ms with the default, 123-126 at 10000 rounds, 67-68 at 1000 and 57-62 with
# passive waiting (1 thread: 56-62), and a 256-token prefill ran at 30 t/s against 274. 1000
# rounds (tens of microseconds) still cover the gaps between a step's regions on a busy machine,
# which libgomp also falls back to by itself once a team outnumbers the CPUs.
GOMP_SPINCOUNT = "1000"
# On a quiet host 1000 rounds are too few: `pause` took 24-33 cycles in the fifth session's
# measurements (not ~140), so 1000 rounds are ~10 us, an empty two-thread region cost 61k cycles
# (a sleep and a ~20 us wake in this VM) against 4k at 100000, and gemma3 Q8_0's tg128 ran
# 68.0 / 73.9 t/s at 1000, 79.4 / 79.5 at 10000 and 76.9 / 78.1 at 100000 (alternated, load
# 1.1-1.5 with the bench itself; docs/BENCHMARKS.md, fifth session, end). A process that other
# processes leave all its cores but half of one (free_cores, from its start) takes this one.
GOMP_SPINCOUNT_QUIET = "10000"


def _cpu_ticks():
    """(idle + iowait ticks of every CPU, all their ticks, this process's own CPU ticks): Linux's
    /proc/stat and os.times, in clock ticks; None where either cannot be read."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
        own = os.times()
        return ticks[3] + ticks[4], sum(ticks), (own.user + own.system) * os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


_START = _cpu_ticks(), time.monotonic()     # this process's first sample, taken at its imports


def free_cores(window=0.1, since=None):
    """Cores other processes left free over the last `window` seconds at least: the idle ones plus
    what this process used itself (None where /proc/stat cannot be read). `since` (a `_START`-like
    (ticks, time)) starts the window earlier, and the call then sleeps only for what is left of
    `window`. The load average lags a minute and holds a previous run's own load: it read 1.2-1.5
    on an idle 2-core host just after `pip install` (which kept the first run's compile helper
    off: 44 s instead of 34) and 1.5-1.7 between back-to-back benches (which took the busy spin:
    Qwen2.5's tg128 45.3 t/s against 54.3)."""
    first, t0 = since if since is not None else (_cpu_ticks(), time.monotonic())
    time.sleep(max(0.0, window - (time.monotonic() - t0)))
    last = _cpu_ticks()
    if first is None or last is None or last[1] <= first[1]:
        return None
    idle, total, own = (b - a for a, b in zip(first, last))
    return min(total, idle + own) / total * (os.cpu_count() or 1)


def gomp_spincount():
    """libgomp's spin for a process starting now: GOMP_SPINCOUNT_QUIET where other processes left
    it all its cores but half of one since its start (by the load average where /proc/stat
    cannot be read), else GOMP_SPINCOUNT: where a team shares a core with another process, a
    long spin holds the core its descheduled teammate could run on. Where the load rises later,
    Lanes moves the decode step to fewer threads (whose regions then do not wait on a set-aside
    thread)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    free = free_cores(since=_START)
    if free is None:
        try:
            free = cores - os.getloadavg()[0]
        except (OSError, AttributeError):
            return GOMP_SPINCOUNT
    return GOMP_SPINCOUNT_QUIET if free >= cores - 0.5 else GOMP_SPINCOUNT


def set_threads(n_threads):
    """Size numba's pool (and keep OpenBLAS to the same count, so the two never oversubscribe)."""
    import numba
    n = max(1, min(int(n_threads or os.cpu_count() or 1), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    return n


def prefer_threading_layers(order=DECODE_LAYERS):
    """Ask numba for the first available of `order` at its first parallel launch, unless the
    user chose (NUMBA_THREADING_LAYER[_PRIORITY]), and libgomp for a spin as long as the host's
    load allows (gomp_spincount) unless the user set its wait (GOMP_SPINCOUNT, OMP_WAIT_POLICY);
    no effect once threads run."""
    import numba
    if not (os.environ.get("GOMP_SPINCOUNT") or os.environ.get("OMP_WAIT_POLICY")):
        os.environ["GOMP_SPINCOUNT"] = gomp_spincount()   # read when libgomp loads: the first launch
    if os.environ.get("NUMBA_THREADING_LAYER") or os.environ.get("NUMBA_THREADING_LAYER_PRIORITY"):
        return
    numba.config.THREADING_LAYER_PRIORITY = list(order)


_warned = []


def warn_slow_threading():
    """numba without tbb or libgomp falls back to its workqueue layer: ~54 us per parallel
    region instead of ~2 us, which a decode step with ~150 regions cannot afford."""
    import numba
    if _warned:
        return
    _warned.append(True)
    try:
        layer = numba.threading_layer()
    except ValueError:
        return
    if layer == "workqueue":
        print("dasllama: numba runs on its slow 'workqueue' threading layer; "
              "pip install tbb (or install libgomp) for full speed.", file=sys.stderr)


def ram_bytes():
    """Physical memory, for budgets (8 GiB where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


class Lanes:
    """How many of a model's n threads run each decode step, learned from the steps' times.

    A decode step is ~150 short parallel regions, each ending in a barrier that waits for
    every thread of the team. On a machine where other work holds the cores, a thread that
    the OS has set aside stalls every region until it runs again: on the shared 2-core host of
    2026-12-06 (load 7-8) gemma3's step took 600-1760 ms on 2 threads and 130-160 ms on one,
    and llama.cpp's spinning team as badly (3.5 t/s, the seed engine, which parks slow lanes,
    22); with libgomp's spin cut short (GOMP_SPINCOUNT above) the team still lost, 50-68 ms
    against 44-59 (alternated in one process). So each step runs on `pick()` threads and
    reports its time to `record`: the count with the lower recent time wins, and the other is
    tried for one step now and then: first on step FIRST_PROBE, then after a gap that doubles
    each time it loses (from PROBE_FIRST, up to PROBE_MAX) and starts again at PROBE_FIRST
    when it wins, so the team comes back when the machine frees up. The counts tried are n
    and 1.
    A probe costs a step on the slower count: on a quiet machine ~1.8x a team's step, five of
    them in 128 tokens ~3 % of the tokens' time. So while the team runs, a probe that lost
    by more than CLEAR sends the next one PROBE_MAX steps on, and the team's own times call
    it sooner: their median SLOWER above the one the last probe lost to (the machine got
    busy) probes at the next step. On one thread no such sign shows the machine freeing up,
    and the gap doubles as before.
    Which thread computes which rows never changes a result (a copy's prefill kernel splits its
    row groups by the live thread count, and every row's arithmetic is the same whichever thread
    runs it; attention's split follows the model's n_threads, passed as before)."""

    FIRST_PROBE = 3     # the first step on the other count: the third (two to compare it with)
    PROBE_FIRST = 8
    PROBE_MAX = 256
    KEEP = 3        # the current count's recent step times; their median is its estimate
    CLEAR = 1.5     # a probe of one thread this much slower than the team: the next in PROBE_MAX
    SLOWER = 1.25   # the team's median this much above the one a probe lost to: probe now

    def __init__(self, n_max):
        self.n_max = int(n_max)
        self.counts = (self.n_max, 1) if self.n_max > 1 else (1,)
        self.times = []     # the current count's recent step times
        self.current = self.n_max
        self.gap = self.PROBE_FIRST
        self.until_probe = self.FIRST_PROBE
        self.probing = None
        self.beaten = None  # the team's median that the last probe lost to (None: on one thread)

    def pick(self):
        """The thread count of the next step."""
        if len(self.counts) == 1:
            return self.current
        self.until_probe -= 1
        if self.until_probe <= 0:
            self.probing = self._other()
            return self.probing
        return self.current

    def record(self, n, seconds):
        """The step just run on n threads took `seconds`."""
        if len(self.counts) == 1:
            return
        if self.probing != n:
            self.times = (self.times + [seconds])[-self.KEEP:]
            if self.beaten is not None and len(self.times) == self.KEEP and self._median() > self.SLOWER * self.beaten:
                self.until_probe = min(self.until_probe, 1)     # the team slowed down: probe next
            return
        self.probing = None     # the probe, one fresh step, against the current's median
        if not self.times or seconds < self._median():
            self.current, self.times, self.gap = n, [seconds], self.PROBE_FIRST   # it wins: switch
            self.beaten = None
        elif self.current == self.n_max and seconds > self.CLEAR * self._median():
            self.gap, self.beaten = self.PROBE_MAX, self._median()  # far behind: the team's times call the next
        else:
            self.gap = min(2 * self.gap, self.PROBE_MAX)    # it lost again: try it less often
            self.beaten = self._median() if self.current == self.n_max else None
        self.until_probe = self.gap

    def _median(self):
        return sorted(self.times)[len(self.times) // 2]

    def _other(self):
        return self.counts[1] if self.current == self.counts[0] else self.counts[0]
