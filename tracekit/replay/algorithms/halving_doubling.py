"""Recursive halving-doubling (Rabenseifner; ASTRA-sim's HalvingDoubling.cc), nearest partner first.

Over p = 2^L positions: reduce-scatter by recursive halving — at step i position x exchanges half of
its current range of S with partner x XOR 2^i (distance 1, 2, 4, ...: inside a host first, so the
largest halves stay on NVLink) — then all-gather by recursive doubling in the reverse order.
Each rank sends (p-1)/p * S in each phase: 2(p-1)/p * S for AllReduce, 2(p-1) * S in total.

When n is not a power of two, the last r = n - p positions first send their whole S to position
x - p (fold), the p others run the algorithm, and each then returns the whole result (unfold):
AllReduce moves 2(p-1) * S + 2r * S in total. ReduceScatter and AllGather are only defined here for
a power of two (callers fall back to the ring otherwise). AllGather doubles whole shards, so it uses
the collective's S for every shard (exact when the shards are equal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracekit.replay.algorithms.base import Builder, Template, empty
from tracekit.replay.algorithms.registry import Algorithm

if TYPE_CHECKING:
    from tracekit.replay.algorithms.registry import Request


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def _halving(b: Builder, p: int, into: dict[int, int], lo: list[int]) -> None:
    """Recursive halving among positions 0..p-1; `lo` tracks each one's range start (parts)."""
    size = p
    bit = 1
    while bit < p:
        size //= 2
        sent = {}
        for x in range(p):
            partner = x ^ bit
            keep_upper = bool(x & bit)
            give = lo[x] if keep_upper else lo[x] + size
            deps = [into[x]] if x in into else []
            sent[partner] = b.add(x, partner, give, give + size, deps)
        for x in range(p):
            if x & bit:
                lo[x] += size
            into[x] = sent[x]
        bit <<= 1


def _doubling(b: Builder, p: int, into: dict[int, int], lo: list[int], size: int) -> None:
    """Recursive doubling among positions 0..p-1 from ranges [lo[x], lo[x] + size), farthest partner first."""
    bit = p >> 1
    while bit >= 1:
        sent = {}
        for x in range(p):
            partner = x ^ bit
            deps = [into[x]] if x in into else []
            sent[partner] = b.add(x, partner, lo[x], lo[x] + size, deps)
        for x in range(p):
            lo[x] = min(lo[x], lo[x ^ bit])
            into[x] = sent[x]
        size *= 2
        bit >>= 1


def all_reduce(n: int) -> Template:
    if n < 2:
        return empty(n)
    p = 1 << (n.bit_length() - 1)
    b = Builder(n, p)
    into: dict[int, int] = {}
    for extra in range(p, n):
        into[extra - p] = b.add(extra, extra - p, 0, p, [])
    lo = [0] * p
    _halving(b, p, into, lo)
    _doubling(b, p, into, lo, 1)
    for extra in range(p, n):
        b.add(extra - p, extra, 0, p, [into[extra - p]] if extra - p in into else [])
    return b.build()


def reduce_scatter(n: int) -> Template:
    if not is_power_of_two(n):
        raise ValueError("halving-doubling reduce-scatter needs a power-of-two group")
    if n < 2:
        return empty(n)
    b = Builder(n, n)
    _halving(b, n, {}, [0] * n)
    return b.build()


def all_gather(n: int) -> Template:
    if not is_power_of_two(n):
        raise ValueError("halving-doubling all-gather needs a power-of-two group")
    if n < 2:
        return empty(n)
    b = Builder(n, 1)
    # Shards are whole units of S (den 1): position x starts with unit range [x, x + 1) of n units,
    # which with den 1 means S bytes per unit.
    _doubling_units(b, n)
    return b.build()


def _doubling_units(b: Builder, p: int) -> None:
    """All-gather by doubling: at the step with partner distance d each rank sends the shards it holds."""
    into: dict[int, int] = {}
    held = 1
    bit = 1
    while bit < p:
        sent = {}
        for x in range(p):
            deps = [into[x]] if x in into else []
            sent[x ^ bit] = b.add(x, x ^ bit, 0, held, deps)
        into = sent
        held *= 2
        bit <<= 1


def _serves(req: Request) -> bool:
    return req.comm_type == "ALL_REDUCE" or is_power_of_two(req.layout.n)


ALGORITHM = Algorithm(
    name="halving-doubling",
    summary="recursive halving-doubling, nearest partner first (AllReduce on any group, with a fold; "
    "ReduceScatter and AllGather on 2^k ranks)",
    builders={
        "ALL_REDUCE": lambda req: all_reduce(req.layout.n),
        "REDUCE_SCATTER": lambda req: reduce_scatter(req.layout.n),
        "ALL_GATHER": lambda req: all_gather(req.layout.n),
    },
    applies=_serves,
    channels=False,
)
