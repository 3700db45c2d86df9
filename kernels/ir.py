"""LLVM IR for numba: the scalar operations numba lacks (fma, f16 <-> f32) and `Gen`, the
vector idioms the IR block dots are written in.

Numba has no float16 scalar type and no fused multiply-add; ggml uses both (F16C conversions
and `_mm256_fmadd_ps`), and matching its rounding needs the same operations, not emulations.
The block dots built on Gen are in blockdots.py, their tile loops in simd.py.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

def _named(t):
    """t with its name computed. llvmlite computes a type's name on first use and keeps it on
    the object, which changes how the type pickles; numba keys a closure's disk cache on its
    pickled cells, and a kernel template's types are among them (as the cells or as globals of
    the intrinsics they hold). Named lazily, a kernel looked up before any IR was built and
    saved after its own keyed differently: it missed the cache in every process (Kokoro's int8
    conv and matmul drivers: ~4 s of compiling at each start)."""
    str(t)
    return t


I8, I16, I32, I64 = (_named(ir.IntType(n)) for n in (8, 16, 32, 64))
F32T, F64T, HALF = _named(ir.FloatType()), _named(ir.DoubleType()), _named(ir.HalfType())


def vec(t, n):
    return _named(ir.VectorType(t, n))


V32I8, V16I8, V16I16, V8I32, V8F32, V16F32, V16I32 = (
    vec(I8, 32), vec(I8, 16), vec(I16, 16), vec(I32, 8), vec(F32T, 8), vec(F32T, 16), vec(I32, 16))


def _call(builder, name, fnty, args):
    fn = cgutils.get_or_insert_function(builder.module, fnty, name)
    return builder.call(fn, args)


@intrinsic
def fma_f32(typingctx, a, b, c):
    """a*b + c in float32 with a single rounding (llvm.fma.f32)."""
    sig = types.float32(types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return _call(builder, "llvm.fma.f32", ir.FunctionType(F32T, [F32T, F32T, F32T]), list(args))

    return sig, codegen


@intrinsic
def max_f32(typingctx, a, b):
    """The larger of float32 a and b (llvm.maxnum.f32). Unlike numba's max (a compare and a
    select), a loop of these with the nnan and nsz flags vectorises as a max reduction."""
    sig = types.float32(types.float32, types.float32)

    def codegen(context, builder, signature, args):
        return _call(builder, "llvm.maxnum.f32", ir.FunctionType(F32T, [F32T, F32T]), list(args))

    return sig, codegen


@intrinsic
def fma_f16(typingctx, a, b, c):
    """IEEE half bits of a*b + c for half bits a, b, c, rounded once to half (llvm.fma.f16):
    one lane of AVX512-FP16's vfmadd*ph. Exact only where the CPU numba compiles for has
    avx512fp16; elsewhere LLVM widens it to float32 and rounds twice."""
    sig = types.uint16(types.uint16, types.uint16, types.uint16)

    def codegen(context, builder, signature, args):
        halves = [builder.bitcast(v, HALF) for v in args]
        r = _call(builder, "llvm.fma.f16", ir.FunctionType(HALF, [HALF, HALF, HALF]), halves)
        return builder.bitcast(r, I16)

    return sig, codegen


@intrinsic
def f16_to_f32(typingctx, bits):
    """The float32 value of IEEE half `bits` (a uint16): exact, like F16C vcvtph2ps."""
    sig = types.float32(types.uint16)

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], HALF), F32T)

    return sig, codegen


@intrinsic
def f32_to_f16(typingctx, x):
    """IEEE half bits (uint16) of float32 `x`, rounded to nearest even like F16C vcvtps2ph."""
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], HALF), I16)

    return sig, codegen


@intrinsic
def bits_f32(typingctx, bits):
    """The float32 whose IEEE bits are the uint32 `bits`."""
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], F32T)

    return sig, codegen


@intrinsic
def f32_bits(typingctx, x):
    """The IEEE bits (uint32) of float32 `x`."""
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], I32)

    return sig, codegen


def _u32_op(op, doc):
    """An @intrinsic (uint32, uint32) -> uint32 wrapping op: numba widens uint32 arithmetic to
    64 bits, which in a vectorised loop costs a zero-extension, 64-bit lanes and a repack."""
    @intrinsic
    def u32(typingctx, a, b):
        sig = types.uint32(types.uint32, types.uint32)

        def codegen(context, builder, signature, args):
            return getattr(builder, op)(args[0], args[1])

        return sig, codegen
    u32.__doc__ = doc
    return u32


add_u32 = _u32_op("add", "a + b mod 2**32, as uint32.")
sub_u32 = _u32_op("sub", "a - b mod 2**32, as uint32.")
shl_u32 = _u32_op("shl", "a << b (b < 32) mod 2**32, as uint32.")


@intrinsic
def keep_alive(typingctx, arr):
    """A use of `arr` that no pass removes. numba frees an array after its last use in the
    function; a kernel that hands an array's raw address to IR tiles must call this after the
    last tile, or the memory may be freed (and reused) while the tiles still read it."""
    sig = types.void(arr)

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def thread_count(typingctx):
    """The threads a parallel region of this call will run on (numba.set_num_threads' count),
    as int64. numba.get_num_threads() inside a kernel calls the threading layer through a
    ctypes pointer, which numba will not cache; this calls the layer's symbol by name, as
    numba's own parallel regions do, and caches."""
    from numba.np.ufunc.parallel import _launch_threads
    _launch_threads()       # the layer's symbols are registered with LLVM from here on

    def codegen(context, builder, signature, args):
        # declared as numba's parallel regions declare it (one declaration a module)
        return _call(builder, "get_num_threads", ir.FunctionType(I64, []), [])

    return types.int64(), codegen


def i64_call(n_args, name, emit):
    """(signature, codegen) of an @intrinsic that calls the internal LLVM function `name`
    (n_args i64 -> void), whose body emit(builder, args) writes once per module: the form of
    every IR kernel here (addresses, strides and counts as int64)."""
    sig = types.void(*([types.int64] * n_args))

    def build_function(module):
        fn = cgutils.get_or_insert_function(module, ir.FunctionType(ir.VoidType(), [I64] * n_args), name)
        if fn.is_declaration:
            fn.linkage = "internal"
            builder = ir.IRBuilder(fn.append_basic_block("entry"))
            emit(builder, list(fn.args))
            builder.ret_void()
        return fn

    def codegen(context, builder, signature, args):
        builder.call(build_function(builder.module),
                     [context.cast(builder, v, t, types.int64) for v, t in zip(args, signature.args)])
        return context.get_dummy_value()

    return sig, codegen


class Gen:
    """IRBuilder plus the handful of vector idioms the block dots need.

    vnni: form the 4-products lanes with one vpdpbusd instead of pmaddubsw + pmaddwd (same
    int32 lanes: our operands never saturate pmaddubsw's int16 pairs).
    avx512: 512-bit pmaddubsw / pmaddwd as those instructions (AVX512BW); without it they are
    spelt in plain IR, exact in our ranges, so a host without AVX-512 can check a zmm tile."""

    def __init__(self, builder, vnni=False, avx512=False):
        self.b = builder
        self.vnni = vnni
        self.avx512 = avx512

    # constants and memory
    def c(self, ty, v):
        if isinstance(ty, ir.VectorType):
            vals = v if isinstance(v, (list, tuple)) else [v] * ty.count
            return ir.Constant(ty, [ir.Constant(ty.element, x) for x in vals])
        return ir.Constant(ty, v)

    def at(self, base, off):
        """i8* base + off (off: python int or i64)."""
        if isinstance(off, int):
            off = self.c(I64, off)
        return self.b.gep(base, [off])

    def load(self, base, off, ty):
        ptr = self.b.bitcast(self.at(base, off), ty.as_pointer())
        ld = self.b.load(ptr)
        ld.align = 1
        return ld

    def f16(self, base, off):
        return self.b.fpext(self.b.bitcast(self.load(base, off, I16), HALF), F32T)

    def f32(self, base, off):
        return self.load(base, off, F32T)

    def prefetch(self, ptr, locality=2):
        """Prefetch the line at ptr (i8*) for reading: locality 3 is prefetcht0 (every level), 2
        prefetcht1 (L2 and out), 1 prefetcht2, 0 prefetchnta."""
        fn = cgutils.get_or_insert_function(
            self.b.module, ir.FunctionType(ir.VoidType(), [ptr.type, I32, I32, I32]), "llvm.prefetch.p0")
        self.b.call(fn, [ptr, self.c(I32, 0), self.c(I32, locality), self.c(I32, 1)])

    def intr(self, name, ret, args):
        fn = cgutils.get_or_insert_function(self.b.module, ir.FunctionType(ret, [a.type for a in args]), name)
        return self.b.call(fn, args)

    # vector idioms
    def splat(self, x, n):
        v = self.b.insert_element(ir.Constant(vec(x.type, n), ir.Undefined), x, self.c(I32, 0))
        return self.b.shuffle_vector(v, ir.Constant(vec(x.type, n), ir.Undefined), self.c(vec(I32, n), 0))

    def shuffle(self, a, b, idx):
        return self.b.shuffle_vector(a, b, self.c(vec(I32, len(idx)), list(idx)))

    def maddubs(self, u, s):
        """u8 x s8 pairs -> i16 (no saturation in our ranges), 256 or 512 bits."""
        n = u.type.count
        if n == 32:
            return self.intr("llvm.x86.avx2.pmadd.ub.sw", V16I16, [u, s])
        if self.avx512:
            return self.intr("llvm.x86.avx512.pmaddubs.w.512", vec(I16, 32), [u, s])
        return self._pairs(self.b.zext(u, vec(I16, n)), self.b.sext(s, vec(I16, n)))

    def maddwd(self, a, b):
        """i16 x i16 pairs -> i32, 256 or 512 bits."""
        n = a.type.count
        if n == 16:
            return self.intr("llvm.x86.avx2.pmadd.wd", V8I32, [a, b])
        if self.avx512:
            return self.intr("llvm.x86.avx512.pmaddw.d.512", V16I32, [a, b])
        return self._pairs(self.b.sext(a, vec(I32, n)), self.b.sext(b, vec(I32, n)))

    def _pairs(self, a, b):
        """Lane i of the products a*b summed with lane i+1, for even i (plain IR)."""
        prod = self.b.mul(a, b)
        n = prod.type.count
        return self.b.add(self.shuffle(prod, prod, range(0, n, 2)), self.shuffle(prod, prod, range(1, n, 2)))

    def psign(self, a, b):
        return self.intr("llvm.x86.avx2.psign.b", V32I8, [a, b])

    def fma(self, a, b, c):
        sfx = f"v{a.type.count}f32" if isinstance(a.type, ir.VectorType) else "f32"
        return self.intr(f"llvm.fma.{sfx}", a.type, [a, b, c])

    def hsum8(self, v):
        """hsum_float_8 order: (v0+v4 + v2+v6) + (v1+v5 + v3+v7)."""
        b = self.b
        s = b.fadd(self.shuffle(v, v, [0, 1, 2, 3]), self.shuffle(v, v, [4, 5, 6, 7]))
        s = b.fadd(self.shuffle(s, s, [0, 1]), self.shuffle(s, s, [2, 3]))
        return b.fadd(b.extract_element(s, self.c(I32, 0)), b.extract_element(s, self.c(I32, 1)))

    def reduce_tree(self, v, op):
        """Lane 0 of a shuffle tree of op over v's lanes (halves folded onto the low lanes)."""
        n = v.type.count
        while n > 1:
            n //= 2
            v = op(v, self.shuffle(v, v, [n + i if i < n else i for i in range(v.type.count)]))
        return self.b.extract_element(v, self.c(I32, 0))

    def hsum_exact(self, v):
        """Sum of float lanes holding integers below 2**24: exact in any order."""
        n = v.type.count
        while n > 1:
            n //= 2
            v = self.b.fadd(self.shuffle(v, v, range(n)), self.shuffle(v, v, range(n, 2 * n)))
        return self.b.extract_element(v, self.c(I32, 0))

    def sum_lanes_of_each(self, vectors, ty):
        """Up to 8 vectors of 8 lanes -> one vector whose lane i is the sum of vectors[i]
        (missing ones count as zero). Every caller sums integers (as i32, or as f32 below
        2**24), exact in any order, so the order is the cheapest: two levels of in-lane
        phadd, then each 128-bit half's partial sums added to the other's (one permute each
        way: even/odd shuffles across the halves at every level took a vpermq per phadd)."""
        zero = self.c(ty, 0 if ty.element == I32 else 0.0)
        add = self.b.add if ty.element == I32 else self.b.fadd
        if len(vectors) == 1:  # decode: one horizontal sum into lane 0
            v = vectors[0]
            for n in (4, 2, 1):
                v = add(self.shuffle(v, v, range(n)), self.shuffle(v, v, range(n, 2 * n)))
            return self.b.insert_element(zero, self.b.extract_element(v, self.c(I32, 0)), self.c(I32, 0))
        name = "llvm.x86.avx2.phadd.d" if ty.element == I32 else "llvm.x86.avx.hadd.ps.256"

        def phadd(a, b):    # [a0+a1, a2+a3, b0+b1, b2+b3 | a4+a5, a6+a7, b4+b5, b6+b7]
            return self.intr(name, ty, [a, b])

        vs = list(vectors) + [zero] * (8 - len(vectors))
        l1 = [phadd(vs[i], vs[i + 1]) for i in range(0, 8, 2)]
        # l2[j]: lanes 0-3 the sums of lanes 0-3 of vectors 4j..4j+3, lanes 4-7 of lanes 4-7
        l2 = [phadd(l1[0], l1[1]), phadd(l1[2], l1[3])]
        low = self.shuffle(l2[0], l2[1], [0, 1, 2, 3, 8, 9, 10, 11])
        high = self.shuffle(l2[0], l2[1], [4, 5, 6, 7, 12, 13, 14, 15])
        return add(low, high)

    def gather_scalars(self, values):
        """Scalars -> <8 x f32> (unused lanes 0)."""
        v = self.c(V8F32, 0.0)
        for i, x in enumerate(values):
            v = self.b.insert_element(v, x, self.c(I32, i))
        return v

    def nibbles(self, base, off):
        """16 bytes -> <32 x i8>: low nibbles then high nibbles (ggml element order)."""
        q = self.load(base, off, V16I8)
        lo = self.b.and_(q, self.c(V16I8, 0xF))
        hi = self.b.lshr(q, self.c(V16I8, 4))
        return self.shuffle(lo, hi, range(32))

    def bits32(self, word):
        """i32 -> <32 x i8> with byte e = 16 if bit e is set, else 0. With VNNI (AVX-512VL/BW
        on every CPU that has it) the word is a mask register: one masked move of 16s, where
        the spread-and-compare below takes five ops."""
        if self.vnni:
            return self.b.select(self.b.bitcast(word, vec(ir.IntType(1), 32)), self.c(V32I8, 16),
                                 self.c(V32I8, 0))
        w = self.splat(word, 8)
        w = self.b.bitcast(w, V32I8)
        bytes_ = self.shuffle(w, w, [e // 8 for e in range(32)])
        mask = self.c(V32I8, [1 << (e % 8) for e in range(32)])
        hit = self.b.icmp_unsigned("!=", self.b.and_(bytes_, mask), self.c(V32I8, 0))
        return self.b.select(hit, self.c(V32I8, 16), self.c(V32I8, 0))

    def lanes(self, u, s, acc=None):
        """Unsigned quants u x signed quants s (32 or 64 bytes) -> 8 or 16 int32 lanes of 4
        consecutive products. acc (vnni only): vpdpbusd's starting sums. Only vpdpbusd takes
        any u8 (it sums in int32); the pmaddubsw form needs u * s pairs within int16."""
        n = u.type.count // 4
        if self.vnni:
            return self.dpbusd(self.c(vec(I32, n), 0) if acc is None else acc, u, s)
        assert acc is None, "the pmaddubsw form starts from zero"
        return self.maddwd(self.maddubs(u, s), self.c(vec(I16, 2 * n), 1))

    def dpbusd(self, acc, u, s):
        """acc (8 or 16 x i32) + per lane the sum of 4 products u8 x s8 (u, s: vectors of the
        same bytes), wrapping like vpdpbusd: that instruction with vnni, else the same sums in
        plain IR (which lets a host without VNNI check the tiles that use it)."""
        n = acc.type.count
        ty = vec(I32, n)
        u, s = self.b.bitcast(u, ty), self.b.bitcast(s, ty)
        if self.vnni:
            return self.intr(f"llvm.x86.avx512.vpdpbusd.{32 * n}", ty, [acc, u, s])
        b, wide = self.b, vec(I32, 4 * n)
        prod = b.mul(b.zext(b.bitcast(u, vec(I8, 4 * n)), wide), b.sext(b.bitcast(s, vec(I8, 4 * n)), wide))
        for k in range(4):
            acc = b.add(acc, self.shuffle(prod, prod, range(k, 4 * n, 4)))
        return acc

    def lanes_signed(self, w, w_abs, x):
        return self.lanes(w_abs, self.psign(x, w))

    def cvt(self, v):
        return self.b.sitofp(v, vec(F32T, v.type.count))
