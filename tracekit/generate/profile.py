"""Fleet profiles: the documented parameters the generator draws jobs from.

A profile is a TOML file (see tracekit/profiles/*.toml). Every table carries a `sources` table
naming, for each of its values, where the value comes from: `[src KEY]` (a published fact; keys are
those of the research note the profile cites), `[drv]` (arithmetic on sourced values), `[est]` (an
estimate) or `[fit]` (estimated by `tracekit generate --fit` from a dataset). `extends = "NAME"`
starts from another profile and overrides tables key by key.

The distributions, at fleet time t (years since `fleet.start`, taken at the middle of the job's
period of `fleet.period_months`):

* job size s_i:  P(s_i | t) ∝ w_i · exp(g · log2(s_i / 8) · t)        (job_size.weights, .growth)
* class c:       P(c | t)   ∝ share_c · exp(growth_c · t)             (classes.<c>.share, .growth)
* model m of c:  P(m | c)   ∝ share_m                                 (classes.<c>.models.<m>.share)
* sizes:         lognormal with `median` (bytes) and `sigma` (of the natural log), drawn per job
  (or per call for the embedding all-to-all's per-rank skew, `uneven_sigma`).
* tail (large LLM jobs): with probability tail.share a job is a `tail.class` job with a size from
  tail.sizes/tail.weights and a model from tail.models.
"""

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path
from typing import Any

from tracekit.errors import InputError, OutputError

Profile = dict[str, Any]

PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles"
SOURCE_TAGS = ("[src", "[drv", "[est", "[fit")
CLASSES = ("ranking-ddp", "fsdp", "llm-3d")
# Tables whose keys are names (classes, models), not parameters: they carry no `sources`.
_NAME_TABLES = ("classes", "models")


def builtin_profiles() -> list[str]:
    """Names of the profiles shipped in tracekit/profiles/."""
    return sorted(p.stem for p in PROFILE_DIR.glob("*.toml"))


def load_profile(name_or_path: str | Path = "default") -> Profile:
    """A built-in profile by name ('default', 'sample', 'meta-llm-tail') or a TOML file path."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = PROFILE_DIR / f"{name_or_path}.toml"
    if not path.is_file():
        raise InputError(
            f"no profile {str(name_or_path)!r}: give a TOML file or one of {', '.join(builtin_profiles())}"
        )
    with open(path, "rb") as f:
        data = tomllib.load(f)
    base_name = data.pop("extends", None)
    if base_name:
        base_path = Path(base_name)
        if base_path.suffix and not base_path.is_absolute():
            base_path = path.parent / base_path
        base = load_profile(base_path if base_path.suffix else base_name)
        data = _merge(base, data)
    validate_profile(data)
    return data


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def validate_profile(profile: Profile) -> None:
    """Raise ValueError naming the first inconsistent value."""
    fleet = profile.get("fleet", {})
    for key in ("start", "months", "period_months", "iterations", "gpus_per_host"):
        if key not in fleet:
            raise InputError(f"profile: fleet.{key} is missing")
    js = profile["job_size"]
    if len(js["sizes"]) != len(js["weights"]) or not js["sizes"]:
        raise InputError("profile: job_size.sizes and job_size.weights differ in length")
    host = fleet["gpus_per_host"]
    for size in js["sizes"] + list(profile.get("tail", {}).get("sizes", [])):
        if size <= 0 or size % host:
            raise InputError(f"profile: job size {size} is not a positive multiple of {host}")
    if not job_sizes(profile)[0]:
        raise InputError("profile: no job size left under job_size.max_size")
    classes = profile["classes"]
    for name, spec in classes.items():
        if name not in CLASSES:
            raise InputError(f"profile: unknown class {name!r} (classes are {', '.join(CLASSES)})")
        if not spec.get("models"):
            raise InputError(f"profile: class {name} has no models")
    if not any(spec["share"] > 0 for spec in classes.values()):
        raise InputError("profile: every class share is 0")
    tail = profile.get("tail", {})
    if tail.get("share", 0) > 0:
        for model in tail["models"]:
            if model not in classes[tail["class"]]["models"]:
                raise InputError(f"profile: tail model {model!r} is not a model of {tail['class']}")


def is_dist(value: Any) -> bool:
    """A lognormal size {median, sigma}: one value, written as an inline table."""
    return isinstance(value, dict) and set(value) == {"median", "sigma"}


def missing_sources(profile: Profile) -> list[str]:
    """Dotted keys whose value has no `[src|drv|est|fit]` source in its table's `sources`."""
    missing: list[str] = []

    def walk(table: dict[str, Any], where: str, is_names: bool) -> None:
        sources = table.get("sources", {})
        for key, value in table.items():
            if key in ("sources", "extends"):
                continue
            here = f"{where}.{key}" if where else key
            if isinstance(value, dict) and not is_dist(value):
                walk(value, here, key in _NAME_TABLES)
            elif not is_names and where:
                text = sources.get(key, "")
                if not (isinstance(text, str) and text.startswith(SOURCE_TAGS)):
                    missing.append(here)

    walk(profile, "", False)
    return missing


# ---------------------------------------------------------------------------------------------
# The distributions a profile defines (used by the generator, the tests and the fitter)


def job_sizes(profile: Profile) -> tuple[list[int], list[float]]:
    """Job sizes and base weights, after `job_size.max_size`."""
    js = profile["job_size"]
    cap = js.get("max_size")
    pairs = [(s, w) for s, w in zip(js["sizes"], js["weights"], strict=True) if cap is None or s <= cap]
    return [s for s, _ in pairs], [w for _, w in pairs]


def periods(profile: Profile) -> int:
    fleet = profile["fleet"]
    return max(1, math.ceil(fleet["months"] / fleet["period_months"]))


def period_years(profile: Profile, period: int) -> float:
    """t of a period: years from the fleet start to the period's middle."""
    return (period + 0.5) * profile["fleet"]["period_months"] / 12.0


def size_probs(profile: Profile, period: int) -> tuple[list[int], list[float]]:
    """P(job size | period), for the non-tail population."""
    sizes, weights = job_sizes(profile)
    g = profile["job_size"].get("growth", 0.0)
    t = period_years(profile, period)
    raw = [w * math.exp(g * math.log2(s / 8) * t) for s, w in zip(sizes, weights, strict=True)]
    total = sum(raw)
    return sizes, [r / total for r in raw]


def class_probs(profile: Profile, period: int) -> tuple[list[str], list[float]]:
    """P(class | period), for the non-tail population."""
    t = period_years(profile, period)
    names = list(profile["classes"])
    raw = [c["share"] * math.exp(c.get("growth", 0.0) * t) for c in profile["classes"].values()]
    total = sum(raw)
    return names, [r / total for r in raw]


def model_probs(profile: Profile, cls: str) -> tuple[list[str], list[float]]:
    models = profile["classes"][cls]["models"]
    names = list(models)
    raw = [models[m]["share"] for m in names]
    total = sum(raw)
    return names, [r / total for r in raw]


# ---------------------------------------------------------------------------------------------
# Writing


def write_profile(profile: Profile, path: str | Path) -> Path:
    """Write `profile` as TOML (readable by `load_profile`)."""
    path = Path(path)
    lines: list[str] = []
    header = {k: v for k, v in profile.items() if not _is_table(v)}
    for key, value in header.items():
        lines.append(f"{_key(key)} = {_value(value)}")
    _tables(profile, [], lines)
    try:
        path.write_text("\n".join(lines) + "\n")
    except OSError as exc:
        raise OutputError.of(exc, path) from exc
    return path


def _tables(table: dict[str, Any], prefix: list[str], lines: list[str]) -> None:
    for key, value in table.items():
        if not _is_table(value):
            continue
        name = [*prefix, key]
        scalars = {k: v for k, v in value.items() if not _is_table(v)}
        if scalars or not value:
            lines.append("")
            lines.append("[" + ".".join(_key(n) for n in name) + "]")
        for k, v in scalars.items():
            lines.append(f"{_key(k)} = {_value(v)}")
        _tables(value, name, lines)


def _is_table(value: Any) -> bool:
    return isinstance(value, dict) and not is_dist(value)


def _key(key: str) -> str:
    return key if key.replace("-", "").replace("_", "").isalnum() else _value(key)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "nan"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")
