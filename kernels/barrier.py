"""A barrier for a team of threads inside one parallel region (a compiled decode step whose
stages each thread runs its share of: core/llm/team.py).

Each thread owns a cache line of an int64 array (`flags`, STRIDE words apart): the epoch it has
reached, and a count of the threads asleep waiting for it. Waiting is reading the others'
epochs until each holds this one: SPIN rounds of `pause`, then asleep on the word (a futex, as
libgomp's team barrier does after its spin), woken by the thread that moves it on. A pure spin
collapsed under load (0.2-2.2 GB/s of a plain read at load 4-7, docs/BENCHMARKS.md, sixth
session rd6), where the thread waited for was set aside by the OS on the spinner's CPU; spinning
and then yielding (sched_yield) kept the CPU busy too: a thread that never sleeps spends the
scheduler's credit, and the OS then sets it aside the more (a gemma3 team step ran at 2-3x
forward's time at load 6, where sleeping gives the CPU to the waited-for thread).
"""
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from .ir import I64
from .quants import JIT

SPIN = 2000     # rounds of `pause` before a waiting thread sleeps (~20-300 us by the CPU's pause)
STRIDE = 8      # int64 words between two threads' flags: a cache line each (epoch, sleepers)
SYS_FUTEX = 202     # x86-64 Linux
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129


def _atomic_load(order):
    """An intrinsic load(addr): the int64 at address `addr`, an atomic load of `order`."""
    @intrinsic
    def load(typingctx, addr):
        def codegen(context, builder, sig, args):
            return builder.load_atomic(builder.inttoptr(args[0], I64.as_pointer()), order, 8)
        return types.int64(types.int64), codegen
    return load


def _atomic_store(order):
    """An intrinsic store(addr, value): *addr = value (int64), an atomic store of `order`."""
    @intrinsic
    def store(typingctx, addr, value):
        def codegen(context, builder, sig, args):
            builder.store_atomic(args[1], builder.inttoptr(args[0], I64.as_pointer()), order, 8)
            return context.get_dummy_value()
        return types.void(types.int64, types.int64), codegen
    return store


load_acquire, load_seq = _atomic_load("acquire"), _atomic_load("seq_cst")
store_release, store_seq = _atomic_store("release"), _atomic_store("seq_cst")


@intrinsic
def fetch_add(typingctx, addr, value):
    """*addr += value (int64), atomically (sequentially consistent); the old value."""
    def codegen(context, builder, sig, args):
        return builder.atomic_rmw("add", builder.inttoptr(args[0], I64.as_pointer()), args[1], "seq_cst")
    return types.int64(types.int64, types.int64), codegen


@intrinsic
def futex(typingctx, addr, op, value):
    """Linux futex(addr, op, value, NULL): FUTEX_WAIT_PRIVATE sleeps while the 32-bit word at
    addr holds value's low 32 bits (or until a wake, or a signal), FUTEX_WAKE_PRIVATE wakes up
    to `value` sleepers."""
    def codegen(context, builder, sig, args):
        fn = builder.module.globals.get("syscall")
        if fn is None:
            fn = ir.Function(builder.module, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
        zero = ir.Constant(I64, 0)
        return builder.call(fn, [ir.Constant(I64, SYS_FUTEX), args[0], args[1], args[2], zero, zero, zero])
    return types.int64(types.int64, types.int64, types.int64), codegen


@intrinsic
def cpu_pause(typingctx):
    """x86 `pause`: a spin loop's step."""
    def codegen(context, builder, sig, args):
        fn = builder.module.declare_intrinsic("llvm.x86.sse2.pause", fnty=ir.FunctionType(ir.VoidType(), []))
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


for _name, _f in (("load_acquire", load_acquire), ("store_release", store_release), ("load_seq", load_seq),
                 ("store_seq", store_seq), ("fetch_add", fetch_add), ("futex", futex), ("cpu_pause", cpu_pause)):
    _f._set_uuid(f"dasllama.barrier.{_name}")     # stable disk-cache keys (see simd.tile_intrinsic)


def flags_for(n_threads):
    """The flags array of a team of n_threads (every epoch 0)."""
    return np.zeros(STRIDE * max(n_threads, 1), np.int64)


@njit(**JIT)
def arrive_and_wait(flags_at, t, n_threads, epoch):
    """Thread t of the team has reached `epoch`; return once every thread has. flags_at: the
    address of the team's flags (flags_for). A sleeper counts itself on the word it sleeps on
    before it reads the word a last time, and the thread that moves the word reads the count
    after: one of the two sees the other (both sequentially consistent), so no wake is lost,
    and a thread nobody sleeps on makes no system call."""
    mine = flags_at + 8 * STRIDE * t
    store_seq(mine, epoch)
    if load_seq(mine + 8) != 0:
        futex(mine, np.int64(FUTEX_WAKE_PRIVATE), np.int64(2 ** 31 - 1))
    for other in range(n_threads):
        if other == t:
            continue
        at = flags_at + 8 * STRIDE * other
        spins = 0
        while load_acquire(at) < epoch:
            if spins < SPIN:
                cpu_pause()
                spins += 1
            else:
                fetch_add(at + 8, np.int64(1))
                seen = load_seq(at)
                if seen < epoch:
                    futex(at, np.int64(FUTEX_WAIT_PRIVATE), seen & np.int64(0xFFFFFFFF))
                fetch_add(at + 8, np.int64(-1))


@njit(**JIT)
def epoch_of(flags_at, t):
    """The last epoch thread t reached (every thread's is the same between two team runs)."""
    return load_acquire(flags_at + 8 * STRIDE * t)
