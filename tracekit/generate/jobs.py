"""Draw one job from a profile: its class, model, size, start time, parallelism and sizes.

Each job has its own random stream, seeded from (fleet seed, job index), so a job's content does not
depend on the order or the process it is generated in. Start times are stratified: job i of N starts
at a uniformly random instant of the i-th N-th of the fleet's span, so job ids are chronological and
the periods are evenly filled whatever N is.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tracekit.generate.profile import Profile, class_probs, model_probs, periods, size_probs
from tracekit.parsers.common.names import DTYPE_BYTES

LABEL_SEP = ":"


@dataclass
class JobSpec:
    index: int
    job_id: str
    cls: str
    model: str
    world_size: int
    started_at: datetime
    period: int
    seed: int
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """`class:model`, e.g. 'ranking-ddp:dlrm-a' (jobs.label in the dataset)."""
        return f"{self.cls}{LABEL_SEP}{self.model}"


def job_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"tracekit-generate:{seed}:{index}")


def fleet_span(profile: Profile) -> tuple[datetime, datetime]:
    start = datetime.fromisoformat(str(profile["fleet"]["start"]))
    start = start if start.tzinfo else start.replace(tzinfo=UTC)
    return start, add_months(start, periods(profile) * profile["fleet"]["period_months"])


def add_months(when: datetime, months: int) -> datetime:
    month = when.month - 1 + months
    return when.replace(year=when.year + month // 12, month=month % 12 + 1)


def period_of(profile: Profile, when: datetime) -> int:
    start, _ = fleet_span(profile)
    months = (when.year - start.year) * 12 + (when.month - start.month)
    return min(periods(profile) - 1, max(0, months // profile["fleet"]["period_months"]))


def _choice(rng: random.Random, items: list[Any], probs: list[float]) -> Any:
    cum = list(itertools.accumulate(probs))
    return items[min(len(items) - 1, bisect.bisect_right(cum, rng.random() * cum[-1]))]


def lognormal(rng: random.Random, dist: dict[str, float]) -> int:
    """Bytes from {median, sigma}; 0 when the median is 0 (the role is absent)."""
    median = dist["median"]
    if median <= 0:
        return 0
    sigma = dist.get("sigma", 0.0)
    value = median * math.exp(sigma * rng.gauss(0.0, 1.0)) if sigma > 0 else median
    return max(1, round(value))


def aligned(nbytes: int, dtype: str) -> int:
    """`nbytes` rounded to whole elements of `dtype` (at least one); 0 stays 0 (the role is absent)."""
    size = DTYPE_BYTES[dtype]
    return max(size, round(nbytes / size) * size) if nbytes > 0 else 0


def divisor_at_most(n: int, cap: int, step: int = 8) -> int:
    """The largest divisor of n that is at most cap (a multiple of `step` when one exists)."""
    if n <= cap:
        return n
    best = 1
    for d in range(1, cap + 1):
        if n % d == 0 and (d % step == 0 or best % step != 0):
            best = d
    return best


def draw_job(profile: Profile, seed: int, index: int, jobs: int) -> JobSpec:
    rng = job_rng(seed, index)
    start, end = fleet_span(profile)
    span = (end - start).total_seconds()
    offset = (index + rng.random()) / jobs * span
    started_at = (start + timedelta(seconds=int(offset))).replace(microsecond=0)
    period = period_of(profile, started_at)
    tail = profile.get("tail", {})
    if tail.get("share", 0) > 0 and rng.random() < tail["share"]:
        cls = tail["class"]
        world = _choice(rng, tail["sizes"], tail["weights"])
        model = _choice(rng, tail["models"], [1.0] * len(tail["models"]))
    else:
        names, probs = class_probs(profile, period)
        cls = _choice(rng, names, probs)
        sizes, sprobs = size_probs(profile, period)
        world = _choice(rng, sizes, sprobs)
        model = _choice(rng, *model_probs(profile, cls))
    width = max(6, len(str(jobs - 1)))
    spec = JobSpec(index, f"job-{index:0{width}d}", cls, model, world, started_at, period, rng.getrandbits(63))
    spec.params = _PARAMS[cls](profile, spec, rng)
    return spec


def _ranking_params(profile: Profile, spec: JobSpec, rng: random.Random) -> dict[str, Any]:
    cls = profile["classes"][spec.cls]
    model = cls["models"][spec.model]
    dtypes = _dtypes(cls, model, ("dense_dtype", "a2a_dtype", "ids_dtype", "tiny_dtype"))
    return {
        "dense_bytes": aligned(lognormal(rng, model["dense_bytes"]), dtypes["dense_dtype"]),
        "a2a_bytes": aligned(lognormal(rng, model["a2a_bytes"]), dtypes["a2a_dtype"]),
        "input_bytes": aligned(lognormal(rng, model["input_bytes"]), dtypes["ids_dtype"]),
        "uneven_sigma": model.get("uneven_sigma", 0.0),
        "a2a_calls": int(model.get("a2a_calls", 1)),
        "a2a_group": divisor_at_most(spec.world_size, cls["a2a_group_max"]),
        **dtypes,
    }


def _dtypes(cls: dict[str, Any], model: dict[str, Any], keys: tuple[str, ...]) -> dict[str, str]:
    """The element type of each role: the model's where it names one, else its class's."""
    return {key: str(model.get(key, cls[key])) for key in keys}


def _fsdp_params(profile: Profile, spec: JobSpec, rng: random.Random) -> dict[str, Any]:
    cls = profile["classes"][spec.cls]
    model = cls["models"][spec.model]
    shard = divisor_at_most(spec.world_size, cls["shard_group_max"])
    dtypes = _dtypes(cls, model, ("dtype", "a2a_dtype", "ids_dtype", "tiny_dtype"))
    return {
        "units": int(model["units"]),
        "unit_bytes": aligned(lognormal(rng, model["unit_bytes"]), dtypes["dtype"]),
        "a2a_bytes": aligned(lognormal(rng, model["a2a_bytes"]), dtypes["a2a_dtype"]),
        "input_bytes": aligned(lognormal(rng, model["input_bytes"]), dtypes["ids_dtype"]),
        "uneven_sigma": model.get("uneven_sigma", 0.0),
        "a2a_calls": int(model.get("a2a_calls", 1)),
        "shard": shard,
        "replicate": spec.world_size // shard,
        **dtypes,
    }


def _llm_params(profile: Profile, spec: JobSpec, rng: random.Random) -> dict[str, Any]:
    cls = profile["classes"][spec.cls]
    model = cls["models"][spec.model]
    tp = math.gcd(int(cls["tp"]), spec.world_size)
    rest = spec.world_size // tp
    choices = [(p, w) for p, w in zip(cls["pp_choices"], cls["pp_weights"], strict=True) if rest % p == 0]
    pp = _choice(rng, [p for p, _ in choices], [w for _, w in choices]) if choices else 1
    # Data-parallel groups stay within dp_max: deepen the pipeline instead (Llama 3: PP=16 at 16K).
    while rest // pp > cls["dp_max"]:
        deeper = [d for d in range(pp + 1, rest + 1) if rest % d == 0]
        pp = deeper[0]
    dtypes = _dtypes(cls, model, ("dtype", "tiny_dtype"))
    return {
        "tp": tp,
        "pp": pp,
        "dp": rest // pp,
        "tp_bytes": aligned(lognormal(rng, model["tp_bytes"]), dtypes["dtype"]),
        "pp_bytes": aligned(lognormal(rng, model["pp_bytes"]), dtypes["dtype"]),
        "param_bytes": aligned(lognormal(rng, model["param_bytes"]), dtypes["dtype"]),
        "micro_batches": int(cls["micro_batches"]),
        "layers": int(cls["layers_per_stage"]),
        **dtypes,
    }


_PARAMS = {"ranking-ddp": _ranking_params, "fsdp": _fsdp_params, "llm-3d": _llm_params}
