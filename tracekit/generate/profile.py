"""Fleet profiles: the documented parameters the generator draws jobs from.

A profile is a TOML file (see tracekit/profiles/*.toml). Every table carries a `sources` table
naming, for each of its values, where the value comes from: `[src KEY]` (a published fact; keys are
those of the research note the profile cites), `[drv]` (arithmetic on sourced values), `[est]` (an
estimate) or `[fit]` (estimated by `tracekit generate --fit` from a dataset). `extends = "NAME"`
starts from another profile and overrides tables key by key.

The distributions, at fleet time t (years since `fleet.start`, taken at the middle of the job's
period of `fleet.period_months`), with t̄ the middle of the fleet's span. The stated weights and
shares are those of the whole fleet (jobs start evenly over the span, and each change is linear in
t − t̄, so it averages out), and no size gains what another loses beyond what the growth asks:

* job size s:    P(s | t) = w_s · (1 + γ · (x_s − x̄) · (t − t̄))        (job_size.weights, .growth)
                 w normalized, x_s = log2(s / 8), x̄ and Var(x) their mean and variance under w,
                 γ = g / Var(x): the mean of log2(job size) grows by g = job_size.growth a year
                 (g = log2 1.5 is a median job 1.5x larger each year);
* class c:       P(c | t) = share_c · (1 + (growth_c − ḡ) · (t − t̄))    (classes.<c>.share, .growth)
                 shares normalized, ḡ their mean growth: the log-odds of two classes change by the
                 difference of their growths a year (at t̄);
* model m of c:  P(m | c)   ∝ share_m                                 (classes.<c>.models.<m>.share)
* sizes:         lognormal with `median` (bytes) and `sigma` (of the natural log), drawn per job
  (or per call for the embedding all-to-all's per-rank skew, `uneven_sigma`).
* tail (large LLM jobs): with probability tail.share a job is a `tail.class` job with a size from
  tail.sizes/tail.weights and a model from tail.models.

A probability must stay positive over the span, which bounds the growths a profile can state
(`growth_limits`; validate_profile says when one is beyond it).
"""

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path
from typing import Any

from tracekit.errors import InputError, OutputError
from tracekit.writers.pytorch_et import DTYPES

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
        for where, table in [(f"classes.{name}", spec)] + [
            (f"classes.{name}.models.{m}", model) for m, model in spec["models"].items()
        ]:
            for key, value in table.items():
                if key.endswith("dtype") and value not in DTYPES:
                    raise InputError(f"profile: {where}.{key} is {value!r}, not one of {', '.join(DTYPES)}")
    if not any(spec["share"] > 0 for spec in classes.values()):
        raise InputError("profile: every class share is 0")
    size_limit, class_limit = growth_limits(profile)
    span = f"over {periods(profile) * fleet['period_months']} months"
    if abs(js.get("growth", 0.0)) > size_limit:
        raise InputError(
            f"profile: job_size.growth {js['growth']} is more than its sizes allow {span} (at most {size_limit:.4g})"
        )
    for name, deviation in _class_deviations(profile).items():
        if abs(deviation) > class_limit:
            raise InputError(
                f"profile: classes.{name}.growth is {deviation:+.4g} from the classes' mean growth, more than "
                f"{class_limit:.4g} {span}"
            )
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


def years_from_middle(profile: Profile, period: int) -> float:
    """t − t̄ of a period: years from the middle of the fleet's span to the period's middle."""
    return period_years(profile, period) - periods(profile) * profile["fleet"]["period_months"] / 24.0


def _size_moments(profile: Profile) -> tuple[list[int], list[float], list[float], float, float]:
    """(sizes, normalized weights, x = log2(size/8), mean of x, variance of x)."""
    sizes, weights = job_sizes(profile)
    total = sum(weights)
    w = [v / total for v in weights]
    x = [math.log2(s / 8) for s in sizes]
    mean = sum(p * v for p, v in zip(w, x, strict=True))
    var = sum(p * (v - mean) ** 2 for p, v in zip(w, x, strict=True))
    return sizes, w, x, mean, var


def size_probs(profile: Profile, period: int) -> tuple[list[int], list[float]]:
    """P(job size | period), for the non-tail population."""
    sizes, w, x, mean, var = _size_moments(profile)
    gamma = profile["job_size"].get("growth", 0.0) / var if var > 0 else 0.0
    dt = years_from_middle(profile, period)
    return sizes, [p * (1 + gamma * (v - mean) * dt) for p, v in zip(w, x, strict=True)]


def _class_deviations(profile: Profile) -> dict[str, float]:
    """growth_c − ḡ per class (ḡ the share-weighted mean growth)."""
    classes = profile["classes"]
    total = sum(c["share"] for c in classes.values())
    mean = sum(c["share"] * c.get("growth", 0.0) for c in classes.values()) / total
    return {name: c.get("growth", 0.0) - mean for name, c in classes.items()}


def class_probs(profile: Profile, period: int) -> tuple[list[str], list[float]]:
    """P(class | period), for the non-tail population."""
    classes = profile["classes"]
    total = sum(c["share"] for c in classes.values())
    deviations = _class_deviations(profile)
    dt = years_from_middle(profile, period)
    names = list(classes)
    return names, [classes[n]["share"] / total * (1 + deviations[n] * dt) for n in names]


def growth_limits(profile: Profile) -> tuple[float, float]:
    """The largest |job_size.growth| and |growth_c − ḡ| that keep every probability positive over
    the span (inf where nothing grows: a fleet of one period, or one size)."""
    widest = abs(years_from_middle(profile, 0))
    if widest == 0:
        return math.inf, math.inf
    _, _, x, mean, var = _size_moments(profile)
    spread = max(abs(v - mean) for v in x)
    return (var / (spread * widest) if spread > 0 else math.inf), 1 / widest


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
