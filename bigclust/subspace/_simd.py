"""Row accumulations of the per-column ADMM's small dense algebra with the accumulator in vector registers.

The ADMM's k x k mat-vec and the three triangular phases of its inverse (:mod:`bigclust.subspace._numba`) sum
rows into one destination row: ``dst += sum_t a_t S[t, :]``.  Numba's loop vectoriser, given one row update
per loop, loads and stores the whole destination for every row summed, and each of those short loops (k = 50:
seven vectors) pays its own set-up and alias checks, so the mat-vec ran at a third and the inverse at about a
tenth of the machine's multiply-add rate.  The intrinsics here emit the loop over t itself, with the
destination row held in registers as vectors of :data:`LANES` doubles from its first load to its one store.

Each is the same arithmetic as the loop it replaces, operation for operation (the forms LLVM compiled those
loops to under ``fastmath={"contract", "reassoc"}``, read from their assembly), so results are unchanged bit
for bit: tests/test_subspace_simd.py compares with the loops on random inputs of every padded width.
Rows are C-contiguous and padded to multiples of :data:`LANES` (``_numba.PAD``); widths above
``MAX_VECTORS`` vectors run as several column blocks (each column's sum is independent of the others).
Numba's on-disk cache keys a kernel by its own file only: after an edit here, run with
``BIGCLUST_NUMBA_CACHE=0`` or touch ``_numba.py``, or its kernels keep the code compiled before.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from bigclust._util.jit import njit

#: doubles per vector (an AVX-512 register, two AVX2 ones)
LANES = 8
#: vectors held per call (64 doubles: 8 of AVX-512's 32 registers, 16 AVX2 registers); wider rows are blocked
MAX_VECTORS = 8
#: how a group of four rows enters the destination row (see :func:`_rows_intrinsic`)
SUB4, ADD4 = 0, 1


def _rows_intrinsic(nvec, mode):
    """``D[di, dc : dc + LANES nvec]`` updated by rows ``t0 <= t < t1`` of ``S`` (columns from ``sc``), each
    weighted by ``A[t, ac]``: in groups of four rows while four remain, then one row at a time.

    SUB4 (the Cholesky factor and its triangular inverse): a group is ``d - fma(a3, s3, fma(a2, s2, fma(a0,
    s0, a1 * s1)))``, a single row ``fma(-a, s, d)``.  ADD4 (the inverse as ``Y^T Y``): a group is ``fma(a3,
    s3, fma(a2, s2, fma(a0, s0, fma(a1, s1, d))))``, a single row ``fma(a, s, d)``.
    ``mode`` None (the mat-vec, :func:`fma_rows`): ``D[di, dc : ...] = sum_t A[t] S[t, sc : ...]`` with ``A``
    the right-hand side (1-D, ``ac`` unused), one fused multiply-add a row in row order from zero.
    """
    @intrinsic
    def rows(typingctx, D, di, dc, S, sc, A, ac, t0, t1):
        def codegen(context, b, sig, args):
            # long: one code generator -- its helpers share the IR builder, the arrays' addresses and the vectors
            f64, i64, i32 = ir.DoubleType(), ir.IntType(64), ir.IntType(32)
            vt = ir.VectorType(f64, LANES)
            fma = cgutils.get_or_insert_function(b.module, ir.FunctionType(vt, [vt, vt, vt]),
                                                 f"llvm.fma.v{LANES}f64")
            const = lambda x: ir.Constant(i64, x)   # noqa: E731

            def base(value, ty):   # an array's data address and the bytes between its rows
                ary = context.make_array(ty)(context, b, value)
                return b.ptrtoint(ary.data, i64), cgutils.unpack_tuple(b, ary.strides, ty.ndim)[0]
            (Dd, Ds), (Sd, Ss), (Ad, As) = base(args[0], sig.args[0]), base(args[3], sig.args[3]), \
                base(args[5], sig.args[5])
            di_, dc_, sc_, ac_, t0_, t1_ = args[1], args[2], args[4], args[6], args[7], args[8]
            dbase = b.add(b.add(Dd, b.mul(di_, Ds)), b.mul(dc_, const(8)))
            sbase = b.add(Sd, b.mul(sc_, const(8)))
            abase = Ad if mode is None else b.add(Ad, b.mul(ac_, const(8)))

            def vector(addr):
                return b.load(b.inttoptr(addr, vt.as_pointer()), align=8)

            def weight(t):   # A[t, ac] broadcast to a vector
                x = b.load(b.inttoptr(b.add(abase, b.mul(t, As)), f64.as_pointer()), align=8)
                v = b.insert_element(ir.Constant(vt, None), x, ir.Constant(i32, 0))
                return b.shuffle_vector(v, ir.Constant(vt, None), ir.Constant(ir.VectorType(i32, LANES), [0] * LANES))

            def srow(t, j):
                return vector(b.add(b.add(sbase, b.mul(t, Ss)), const(8 * LANES * j)))

            def loop(name, start, acc_in, step, stop_at, body):
                """A loop over t from ``start`` while ``t + step <= t1``; returns (t after, accumulators after)."""
                head, exit_ = b.block, b.append_basic_block(f"{name}.exit")
                blk = b.append_basic_block(name)
                b.cbranch(b.icmp_signed("<=", b.add(start, const(step)), stop_at), blk, exit_)
                b.position_at_end(blk)
                t = b.phi(i64)
                t.add_incoming(start, head)
                acc = [b.phi(vt) for _ in range(nvec)]
                for a, a0 in zip(acc, acc_in):
                    a.add_incoming(a0, head)
                new = body(t, acc)
                tn = b.add(t, const(step))
                t.add_incoming(tn, b.block)
                for a, x in zip(acc, new):
                    a.add_incoming(x, b.block)
                b.cbranch(b.icmp_signed("<=", b.add(tn, const(step)), stop_at), blk, exit_)
                last = b.block
                b.position_at_end(exit_)
                t_out = b.phi(i64)
                t_out.add_incoming(start, head)
                t_out.add_incoming(tn, last)
                acc_out = []
                for a0, x in zip(acc_in, new):
                    p = b.phi(vt)
                    p.add_incoming(a0, head)
                    p.add_incoming(x, last)
                    acc_out.append(p)
                return t_out, acc_out

            def group(t, acc):
                w = [weight(b.add(t, const(r))) for r in range(4)]
                out = []
                for j in range(nvec):
                    s = [srow(b.add(t, const(r)), j) for r in range(4)]
                    if mode == SUB4:
                        x = b.call(fma, [w[0], s[0], b.fmul(w[1], s[1])])
                        x = b.call(fma, [w[3], s[3], b.call(fma, [w[2], s[2], x])])
                        out.append(b.fsub(acc[j], x))
                    else:
                        x = b.call(fma, [w[0], s[0], b.call(fma, [w[1], s[1], acc[j]])])
                        out.append(b.call(fma, [w[3], s[3], b.call(fma, [w[2], s[2], x])]))
                return out

            def single(t, acc):
                w = weight(t)
                w = b.fneg(w) if mode == SUB4 else w
                return [b.call(fma, [w, srow(t, j), acc[j]]) for j in range(nvec)]

            if mode is None:
                acc = [ir.Constant(vt, None)] * nvec
                t, acc = loop("rows.one", t0_, acc, 1, t1_, single)
            else:
                acc = [vector(b.add(dbase, const(8 * LANES * j))) for j in range(nvec)]
                t, acc = loop("rows.four", t0_, acc, 4, t1_, group)
                t, acc = loop("rows.one", t, acc, 1, t1_, single)
            for j in range(nvec):
                b.store(acc[j], b.inttoptr(b.add(dbase, const(8 * LANES * j)), vt.as_pointer()), align=8)
            return context.get_dummy_value()
        i = types.int64
        return types.void(D, i, i, S, i, A, i, i, i), codegen
    return rows


def _dispatcher(kernels):
    """An njit function running ``kernels`` (the intrinsics of 1 .. MAX_VECTORS vectors) over a row of
    ``width`` doubles: blocks of MAX_VECTORS vectors, then one call for the rest.  Compiled without fastmath,
    so no flag can reorder the intrinsics' operations.  Numba's cache tells the dispatchers apart by the
    pickled kernels they close over (each holds its own ``mode``)."""
    k1, k2, k3, k4, k5, k6, k7, k8 = kernels

    @njit
    def rows(D, di, dc, S, sc, A, ac, t0, t1, width):
        nvec = width // LANES
        while nvec > 0:
            if nvec >= 8:
                k8(D, di, dc, S, sc, A, ac, t0, t1)
            elif nvec == 7:
                k7(D, di, dc, S, sc, A, ac, t0, t1)
            elif nvec == 6:
                k6(D, di, dc, S, sc, A, ac, t0, t1)
            elif nvec == 5:
                k5(D, di, dc, S, sc, A, ac, t0, t1)
            elif nvec == 4:
                k4(D, di, dc, S, sc, A, ac, t0, t1)
            elif nvec == 3:
                k3(D, di, dc, S, sc, A, ac, t0, t1)
            elif nvec == 2:
                k2(D, di, dc, S, sc, A, ac, t0, t1)
            else:
                k1(D, di, dc, S, sc, A, ac, t0, t1)
            done = min(nvec, MAX_VECTORS) * LANES
            dc += done
            sc += done
            nvec -= MAX_VECTORS
    return rows


#: ``sub_rows(D, di, dc, S, sc, A, ac, t0, t1, width)``: ``D[di, dc : dc + width] -= sum_t A[t, ac]
#: S[t, sc : sc + width]`` over ``t0 <= t < t1`` (width a multiple of LANES), in the SUB4 form
sub_rows = _dispatcher(tuple(_rows_intrinsic(n, SUB4) for n in range(1, MAX_VECTORS + 1)))
#: ``add_rows``: the same with ``+=``, in the ADD4 form
add_rows = _dispatcher(tuple(_rows_intrinsic(n, ADD4) for n in range(1, MAX_VECTORS + 1)))
_products = _dispatcher(tuple(_rows_intrinsic(n, None) for n in range(1, MAX_VECTORS + 1)))


@njit
def fma_rows(M, rhs, out, k):
    """``out[:kp] = M[:k, :kp]^T rhs[:k]``, summed as ``sum_q rhs[q] M[q, :]``: one fused multiply-add a row,
    rows in order, from zero (the ADMM's ``sym_matvec``: its M is symmetric, so this is ``M rhs``).

    M : IN (>= k, kp) C-contiguous, kp a multiple of LANES.  rhs : IN (>= k,).  out : OUT (kp,) (may not alias
    rhs).  At k = 50: 265 ns against 622 ns for the same sums as a loop over four rows at a time, which loaded
    and stored ``out`` on each pass (152 ns with M's rows on cache lines, ``_numba.aligned_empty``).
    """
    _products(out, 0, 0, M, 0, rhs, 0, 0, k, M.shape[1])
