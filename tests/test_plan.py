"""The memory planner: pure arithmetic, and no plan ever holds more than its budget."""
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bigclust.algo.blocks import budget, row_blocks
from bigclust._util.errors import UserError
from bigclust._util.plan import (CONSUMERS, MAX_KERNEL_BLOCK, PlanError, block_rows, consumer_rows, kernel_chunk_rows,
                           normalize_plan, parse_bytes)


def test_block_rows_arithmetic():
    assert block_rows(1000, 8, 3 * 8 * 1000 * 10) == 10
    assert block_rows(1000, 8, 3 * 8 * 1000 * 10 + 8 * 1000 * 3 - 1) == 10  # floor
    assert block_rows(1000, 4, 3 * 8 * 1000 * 10) == 20
    assert block_rows(1000, 8, 8 * 1000 * 10, n_buffers=1) == 10
    assert block_rows(100, 8, 10**12) == 100  # never more than n
    assert block_rows(30000, 8, budget("1GB")) == 10**9 // (3 * 30000 * 8) == 1388
    assert block_rows(30000, 8, budget("1GiB")) == 2**30 // (3 * 30000 * 8)
    with pytest.raises(PlanError, match="cannot hold 3 rows"):
        block_rows(1000, 8, 3 * 8 * 1000 - 1)
    for bad in ("lots", 0, -5, "infGB", "1e400", "nanMB", True, "2e30TB"):
        with pytest.raises(UserError, match=f"max_memory must be a positive number.*got {re.escape(repr(bad))}$"):
            budget(bad)


def test_parse_bytes_units():
    assert parse_bytes("1GB") == 10**9 and parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("1 gib") == 2**30 and parse_bytes("1e9") == 10**9 and parse_bytes(1000) == 1000
    assert parse_bytes("1.5KB") == 1500 and parse_bytes("4G") == 4 * 10**9
    for bad in ("", "GB", "-1GB", 0, "1XB", "infGB", "1e400", "1e300GB", 2**61):
        with pytest.raises(ValueError, match=f"^{re.escape(str(bad))}$"):   # names the value (config adds the key)
            parse_bytes(bad)


def test_row_blocks_are_whole_chunks():
    assert row_blocks(10, 3, 7) == [(0, 6), (6, 10)]
    assert row_blocks(10, 3, 2) == [(0, 3), (3, 6), (6, 9), (9, 10)]  # at least one chunk
    assert row_blocks(10, 1, 4) == [(0, 4), (4, 8), (8, 10)]
    assert row_blocks(5, 5, 100) == [(0, 5)]
    for n, c, r in [(61, 3, 7), (61, 7, 7), (61, 1, 1), (61, 61, 5)]:
        b = row_blocks(n, c, r)
        assert b[0][0] == 0 and b[-1][1] == n and all(x[1] == y[0] for x, y in zip(b, b[1:]))
        assert all(r0 % c == 0 for r0, _ in b)


sizes = st.integers(min_value=1, max_value=200_000)
budgets = st.integers(min_value=1, max_value=2**40)
itemsizes = st.sampled_from([4, 8])


@settings(max_examples=300, deadline=None)
@given(n=sizes, itemsize=itemsizes, budget_=budgets, n_buffers=st.integers(1, 8))
def test_block_rows_never_exceed_budget(n, itemsize, budget_, n_buffers):
    if n_buffers * n * itemsize > budget_:     # refused exactly when one row per buffer does not fit
        with pytest.raises(PlanError, match=f"max_memory={budget_} bytes cannot hold {n_buffers} rows"):
            block_rows(n, itemsize, budget_, n_buffers)
        return
    rows = block_rows(n, itemsize, budget_, n_buffers)
    assert 1 <= rows <= n
    assert n_buffers * rows * n * itemsize <= budget_
    assert rows == n or n_buffers * (rows + 1) * n * itemsize > budget_  # and uses the budget


@settings(max_examples=300, deadline=None)
@given(n=sizes, itemsize=itemsizes, budget_=budgets, m=st.integers(1, 12))
def test_normalize_plan_working_set_within_budget(n, itemsize, budget_, m):
    in_memory = (2 * n * n * itemsize if m == 1 else (m + 2) * n * n * 8) <= budget_
    if not in_memory and (3 * n * itemsize if m == 1 else 5 * n * 8) > budget_:   # nor one streamed row each
        with pytest.raises(PlanError, match=f"max_memory={budget_} bytes cannot hold"):
            normalize_plan(n, itemsize, budget_, n_kernels=m)
        return
    plan = normalize_plan(n, itemsize, budget_, n_kernels=m)
    assert plan.working_set <= budget_
    if plan.in_memory:
        assert plan.block_rows == n
    else:  # in memory was refused for a reason
        assert (2 * n * n * itemsize if m == 1 else (m + 2) * n * n * 8) > budget_


@settings(max_examples=300, deadline=None)
@given(n=sizes, itemsize=itemsizes, budget_=budgets)
def test_kernel_chunks_fit_every_streaming_consumer(n, itemsize, budget_):
    # a block is whole chunks, so a chunk larger than a consumer's block would break its budget
    chunk = kernel_chunk_rows(n, itemsize, budget_)
    assert 1 <= chunk <= n and chunk * n * itemsize <= max(MAX_KERNEL_BLOCK, n * itemsize)
    for consumer in CONSUMERS:
        n_buf, size = CONSUMERS[consumer]
        if n_buf * n * (size or itemsize) > budget_:          # this consumer cannot run: refused, and says so
            with pytest.raises(PlanError, match="cannot hold"):
                consumer_rows(consumer, n, itemsize, budget_)
            continue
        rows = consumer_rows(consumer, n, itemsize, budget_)
        assert chunk <= rows
        blocks = row_blocks(n, chunk, rows)
        assert max(r1 - r0 for r0, r1 in blocks) * n * (size or itemsize) * n_buf <= budget_
