"""A slow, plain-Python fluid simulator written from the model's definition, one event at a time,
to check tracekit.fabric.fluid against on small cases (not used by the package)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def max_min(paths: Sequence[Sequence[tuple[int, float]]], capacity: Sequence[float]) -> list[float]:
    """Progressive filling, one bottleneck level at a time, over plain lists."""
    rates = [0.0] * len(paths)
    frozen = [not p for p in paths]
    room = list(capacity)
    level = 0.0
    while not all(frozen):
        best = math.inf
        for link in range(len(capacity)):
            w = sum(wt for f, p in enumerate(paths) if not frozen[f] for lk, wt in p if lk == link)
            if w > 0:
                best = min(best, max(room[link], 0.0) / w)
        level = max(level, best)
        tight = set()
        for link in range(len(capacity)):
            w = sum(wt for f, p in enumerate(paths) if not frozen[f] for lk, wt in p if lk == link)
            if w > 0 and max(room[link], 0.0) / w <= level * (1 + 1e-12):
                tight.add(link)
        for f, p in enumerate(paths):
            if not frozen[f] and any(lk in tight for lk, _ in p):
                frozen[f] = True
                rates[f] = level
                for lk, wt in p:
                    room[lk] -= wt * level
    return rates


def simulate(
    paths: Sequence[Sequence[tuple[int, float]]],
    capacity: Sequence[float],
    sizes: Sequence[float],
    release: Sequence[float],
    latency: Sequence[float],
    deps: Sequence[Sequence[int]],
) -> tuple[list[float], list[float]]:
    """(start, end) of every flow: ready at max(release, deps' ends), drains after its latency."""
    n = len(paths)
    start, end = [math.inf] * n, [math.inf] * n
    left = list(map(float, sizes))
    activation = [math.inf] * n
    state = ["wait"] * n  # wait -> pending -> active -> done

    def ready_check(t: float) -> None:
        for f in range(n):
            if state[f] == "wait" and all(state[d] == "done" for d in deps[f]):
                start[f] = max([release[f]] + [end[d] for d in deps[f]])
                activation[f] = start[f] + latency[f]
                state[f] = "pending"

    ready_check(0.0)
    t = min([activation[f] for f in range(n) if state[f] == "pending"], default=math.inf)
    while True:
        changed = True
        while changed:
            changed = False
            for f in range(n):
                if state[f] == "pending" and activation[f] <= t * (1 + 1e-12):
                    if sizes[f] == 0 or not paths[f]:
                        state[f], end[f] = "done", activation[f]
                    else:
                        state[f] = "active"
                    changed = True
            ready_check(t)
        act = [f for f in range(n) if state[f] == "active"]
        rates = max_min([paths[f] for f in act], capacity)
        t_done = min([t + left[f] / r for f, r in zip(act, rates, strict=True) if r > 0], default=math.inf)
        t_act = min([activation[f] for f in range(n) if state[f] == "pending"], default=math.inf)
        t_next = min(t_done, t_act)
        if not math.isfinite(t_next):
            return start, end
        for f, r in zip(act, rates, strict=True):
            left[f] -= r * (t_next - t)
            if r > 0 and left[f] <= 1e-9 * sizes[f]:
                state[f], end[f] = "done", t_next
        t = t_next
        ready_check(t)
