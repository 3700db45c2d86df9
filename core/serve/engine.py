"""The server's engine thread: one Model, -np sequences each with its own KV cache, a fair
queue, and decode steps of the active sequences batched into one forward pass.

The model's kernels are not thread-safe (one set of scratch buffers), so every forward pass
runs on this one thread; requests reach it as Jobs and their tokens leave through each
Job's `emit` callback (the HTTP side turns that into an asyncio queue). Admission is first
come, first served; each round feeds every sequence still reading its prompt one chunk of it
(so a long prompt does not stall the others' streams for its whole prefill), then gives every
other sequence one token through Model.decode_batch, which reads each weight once for all.
"""
import codecs
import math
import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from ..llm.constrain import StopStrings
from ..llm.model import ContextFull
from ..llm.sampling import Sampler, SamplerParams


class QueueFull(RuntimeError):
    """Every sequence is busy and the wait queue is full: the client should retry later."""


@dataclass(frozen=True)
class Piece:
    """What one sampled token adds to a response."""
    text: str                     # text now safe to send (stop-string holdback applied)
    token_id: int
    token_text: str               # the token's own piece of text
    logprob: float | None = None
    top_logprobs: tuple = ()      # ((token text, logprob), ...), best first


@dataclass(frozen=True)
class Finished:
    reason: str                   # "stop" (end of text or a stop string) or "length"
    prompt_tokens: int
    completion_tokens: int
    text: str = ""                # the last held-back text released at the end


@dataclass
class Job:
    """One completion: prompt ids in, Pieces then one Finished (or an exception) out."""
    ids: list
    params: SamplerParams
    n_predict: int
    emit: callable                # called from the engine thread with a Piece, Finished or error
    stop: tuple = ()
    constraint: object = None     # core/llm/constrain.py's Constraint, or None
    logprobs: int | None = None   # None: none; k: the sampled token's and the k best
    cancelled: bool = False
    # engine-side state
    slot: object = None
    pending: list = field(default_factory=list)
    logits: np.ndarray = None
    history: list = field(default_factory=list)
    n_gen: int = 0

    def cancel(self):
        """Ask the engine to drop this job (a disconnected client); safe from any thread."""
        self.cancelled = True


@dataclass
class Task:
    """Other work the engine thread must do with the model (embeddings): fn(model, kv)."""
    fn: callable
    emit: callable
    cancelled: bool = False

    def cancel(self):
        self.cancelled = True


class Engine:
    """Runs Jobs and Tasks on one thread over `n_parallel` KV caches of `model`."""

    def __init__(self, model, n_parallel=1, max_queue=64):
        self.model = model
        self.slots = model.new_kvs(n_parallel)
        self.scratch_kv = model.new_kv()     # for Tasks, so they never touch a sequence
        self.max_queue = max_queue
        self.waiting = deque()
        self.active = []
        self.lock = threading.Condition()
        self.running = True
        self.n_served = 0
        self.n_cancelled = 0     # jobs dropped because their client went away
        if n_parallel > 1:      # compile (or load) the batched step now, not in a request
            model.decode_batch([0, 0], self.slots[:2])
            for kv in self.slots:
                kv.reset()
        self.thread = threading.Thread(target=self._run, name="dasllama-engine", daemon=True)
        self.thread.start()

    @property
    def n_ctx(self):
        return self.model.n_ctx

    def submit(self, work):
        """Queue a Job or Task; QueueFull when max_queue are waiting already beyond the free
        sequences, ContextFull when a Job's prompt cannot fit one sequence's context."""
        if isinstance(work, Job):
            if not work.ids:
                raise ValueError("the prompt is empty: give some text.")
            if len(work.ids) >= self.n_ctx:
                raise ContextFull(f"the prompt is {len(work.ids)} tokens but a sequence's context is "
                                  f"{self.n_ctx}: shorten it (or start the server with a larger -c).")
        with self.lock:
            free = max(0, len(self.slots) - len(self.active))
            if len(self.waiting) >= self.max_queue + free:
                raise QueueFull(f"{len(self.waiting)} requests are waiting already")
            self.waiting.append(work)
            self.lock.notify()

    def stop(self):
        with self.lock:
            self.running = False
            self.lock.notify()
        self.thread.join(timeout=10)

    def load(self):
        """(active sequences, waiting requests, jobs cancelled so far), for /health."""
        with self.lock:
            return len(self.active), len(self.waiting), self.n_cancelled

    # -- the engine thread -----------------------------------------------------------------

    def _run(self):
        import numba
        numba.set_num_threads(self.model.n_threads)    # the pool size is per calling thread
        while True:
            with self.lock:
                while self.running and not self.waiting and not self.active:
                    self.lock.wait()
                if not self.running:
                    return
                admitted = self._admit()
            for work in admitted:
                self._guarded(work, self._run_task if isinstance(work, Task) else self._start)
            self._round()

    def _admit(self):
        """Waiting work that can start now: Tasks, and Jobs while a sequence is free (FIFO)."""
        admitted = []
        free = [kv for kv in self.slots if all(j.slot is not kv for j in self.active)]
        while self.waiting:
            work = self.waiting[0]
            if isinstance(work, Job) and not work.cancelled:
                if not free:
                    break
                work.slot = free.pop(0)
                self.active.append(work)
            self.waiting.popleft()
            if not work.cancelled:
                admitted.append(work)
            elif isinstance(work, Job):
                self.n_cancelled += 1
        return admitted

    def _guarded(self, work, fn):
        try:
            return fn(work)
        except Exception as e:    # noqa: BLE001 -- handed to the request, the engine lives on
            self._retire(work)
            work.emit(e)

    def _retire(self, work):
        if work in self.active:
            with self.lock:
                self.active.remove(work)

    def _run_task(self, task):
        self.model.kv = self.scratch_kv
        self.scratch_kv.reset()
        task.emit(task.fn(self.model))

    def _start(self, job):
        job.slot.reset()
        job.pending = list(job.ids)
        job.history = list(job.ids)
        job.sampler = Sampler(job.params)
        job.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        job.stops = StopStrings(job.stop)

    def _round(self):
        """One round: a prompt chunk for each sequence still reading its prompt, then one token
        for each of the others, their forward passes batched into one (Model.decode_batch)."""
        model = self.model
        decoding = []
        for job in list(self.active):
            if job.cancelled:
                self._retire(job)
                self.n_cancelled += 1
            elif job.pending:
                self._guarded(job, self._prefill)
            else:
                token = self._guarded(job, self._sample)
                if token is not None:
                    decoding.append((job, token))
        if len(decoding) == 1:
            job, token = decoding[0]
            model.kv = job.slot
            self._guarded(job, lambda j: setattr(j, "logits", model.eval([token])))
        elif decoding:
            try:
                rows = model.decode_batch([t for _, t in decoding], [j.slot for j, _ in decoding])
            except Exception as e:  # noqa: BLE001 -- handed to the requests, the engine lives on
                for job, _ in decoding:
                    self._retire(job)
                    job.emit(e)
                return
            for (job, _), row in zip(decoding, rows):
                job.logits = row

    def _prefill(self, job):
        model = self.model
        model.kv = job.slot
        chunk, job.pending = job.pending[:model.n_batch], job.pending[model.n_batch:]
        job.logits = model.eval(chunk)

    def _sample(self, job):
        """Sample and emit the job's next token; the token to feed next, or None when done."""
        model = self.model
        logits = job.logits
        if job.constraint is not None:
            job.constraint.mask(logits)
        token = job.sampler.sample(logits, job.history)
        job.n_gen += 1
        if token in model.tokenizer.eog_ids:
            return self._finish(job, "stop")
        if job.constraint is not None:
            job.constraint.accept(token)
        job.history.append(token)
        text = job.decoder.decode(model.tokenizer.token_to_piece(token))
        safe, hit = job.stops.push(text)
        job.emit(Piece(safe, token, self._piece(token), *self._logprobs(job, logits, token)))
        if hit is not None or (job.constraint is not None and job.constraint.done):
            return self._finish(job, "stop")
        if job.n_gen == job.n_predict or job.slot.n_past >= model.n_ctx:
            return self._finish(job, "length")
        return token

    def _finish(self, job, reason):
        self._retire(job)
        tail = ""
        if job.stops.hit is None:
            tail, hit = job.stops.push(job.decoder.decode(b"", final=True))
            tail += "" if hit is not None else job.stops.flush()
        self.n_served += 1
        job.emit(Finished(reason, len(job.ids), len(job.history) - len(job.ids), tail))

    def _logprobs(self, job, logits, token):
        if job.logprobs is None:
            return None, ()
        finite = logits[np.isfinite(logits)]
        top = float(finite.max())
        logz = top + math.log(float(np.exp(finite - top).sum()))
        # a constraint's mask leaves -inf logits: those tokens could not be sampled, and JSON has
        # no -inf, so the alternatives are the finite ones (fewer than asked if the mask is tight)
        best = [i for i in np.argsort(-logits)[:job.logprobs] if np.isfinite(logits[i])] if job.logprobs else []
        return float(logits[token]) - logz, tuple((self._piece(i), float(logits[i]) - logz) for i in best)

    def _piece(self, token):
        return self.model.tokenizer.token_to_piece(int(token)).decode("utf-8", "replace")

