"""One place for the Numba defaults of every kernel.

``BIGCLUST_NUMBA_CACHE=0`` turns the on-disk cache off (e.g. on read-only
installs); by default compiled kernels are cached beside the sources so that
the second process start does not pay compilation again.
"""
import os

import numba
from numba import njit as _njit

CACHE = os.environ.get("BIGCLUST_NUMBA_CACHE", "1") not in ("0", "false", "no")


def njit(*args, **kwargs):
    """``numba.njit`` with ``cache`` defaulting to the project switch.

    ``fastmath`` is never switched on here: kernels that only do pure
    arithmetic may ask for it explicitly (comparisons and guarded divisions need strict IEEE).
    """
    kwargs.setdefault("cache", CACHE)
    if args and callable(args[0]) and len(args) == 1 and not kwargs.get("_sig"):
        return _njit(**kwargs)(args[0])
    return _njit(*args, **kwargs)


def _prefetch_intrinsic():
    """Define :func:`prefetch_row`, a Numba intrinsic (one LLVM instruction that no Python API exposes)."""
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    @intrinsic
    def prefetch_row(typingctx, arr, i):
        """Hint the CPU to start loading row ``i`` of a C-contiguous 2-D array (results unchanged).

        For gathers whose row index comes from data (``M[indices[p]]`` in a
        sparse product): the hardware prefetcher cannot guess those addresses,
        so a kernel asks for row ``indices[p + d]`` while it works on ``p``.
        Lowers to ``llvm.prefetch`` (read, high locality); no bounds check, as
        a prefetch of any address never faults.
        """
        if not (isinstance(arr, types.Array) and arr.ndim == 2 and isinstance(i, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            aryty = sig.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            idx = context.cast(builder, args[1], sig.args[1], types.intp)
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary,
                                           [idx, context.get_constant(types.intp, 0)], wraparound=False)
            i8p = ir.IntType(8).as_pointer()
            fnty = ir.FunctionType(ir.VoidType(), [i8p, ir.IntType(32), ir.IntType(32), ir.IntType(32)])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
            i32 = ir.IntType(32)
            builder.call(fn, [builder.bitcast(ptr, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()

        return types.void(arr, i), codegen

    return prefetch_row


prefetch_row = _prefetch_intrinsic()


#: Numba threads of this process's parallel kernels, set on every worker of a cluster by the driver that
#: runs stages on it (``_Stages`` of :mod:`bigclust.pipeline.scheduler`); 0: Numba's own count, all cores
_SHARE = [0]


def share_threads(n: int) -> None:
    """This process's kernels run on ``n`` threads from their next :func:`follow_share` on (0: all cores)."""
    _SHARE[0] = int(n)


def follow_share() -> None:
    """The calling thread's Numba threads set to this process's share (:func:`share_threads`), if one is set.

    Numba's thread count belongs to the thread that launches a parallel kernel: a long solve calls this
    between its steps, so it takes the cores a stage beside it gave back."""
    n = _SHARE[0]
    if n > 0:
        n = min(n, numba.config.NUMBA_NUM_THREADS)
        if numba.get_num_threads() != n:
            numba.set_num_threads(n)
