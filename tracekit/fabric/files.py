"""Fabric files (`--fabric FILE`): TOML, JSON, or YAML when PyYAML is installed. The format is in
the package docstring. Every value is checked; an unknown key, a key the kind does not read, or a
bad value is an InputError naming the file and the key, in one line."""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from tracekit.errors import InputError, one_line
from tracekit.fabric.presets import PRESETS, preset
from tracekit.fabric.topology import KIND_KEYS, KINDS, MAX_SWITCHES, ROUTINGS, FabricSpec

MAX_FILE_BYTES = 1 << 20
MAX_GBPS = 1e6  # 1 Pb/s per link: anything above is a typo
MAX_LATENCY_US = 1e6
MAX_RATIO = 1e3

# File key -> (FabricSpec field, kind of value, unit factor to the field's unit).
_FIELDS: dict[str, tuple[str, str, float]] = {
    "name": ("name", "text", 1.0),
    "routing": ("routing", "routing", 1.0),
    "nic_gbps": ("nic_Bps", "gbps", 1e9 / 8),
    "link_latency_us": ("link_latency_s", "latency", 1e-6),
    "spines": ("spines", "count", 1.0),
    "links_per_spine": ("links_per_spine", "count", 1.0),
    "leaf_spine_gbps": ("leaf_spine_Bps", "gbps", 1e9 / 8),
    "oversubscription": ("oversubscription", "ratio", 1.0),
    "hosts_per_group": ("hosts_per_group", "hosts", 1.0),
    "racks_per_pod": ("racks_per_pod", "count", 1.0),
    "cores": ("cores", "count", 1.0),
    "spine_core_gbps": ("spine_core_Bps", "gbps", 1e9 / 8),
    "core_oversubscription": ("core_oversubscription", "ratio", 1.0),
}
KEYS = ("kind", "preset", *_FIELDS)
_COMMON_FIELDS = {"name", "routing", "nic_Bps", "link_latency_s"}


def load_fabric(path: str | Path) -> FabricSpec:
    """The FabricSpec a fabric file describes."""
    path = Path(path)
    where = one_line(str(path), 120)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"{where}: cannot read the fabric file ({exc.strerror})") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(f"{where}: a fabric file is at most {MAX_FILE_BYTES} bytes")
    try:
        data = read_mapping(path, raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{where}: not a valid fabric file ({one_line(str(exc), 200)})") from exc
    return fabric_from_dict(data, where)


def fabric_from_dict(data: Any, where: str = "fabric") -> FabricSpec:
    """A FabricSpec from parsed file content (keys in file units: Gb/s, microseconds)."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: a fabric file is a table of keys ({', '.join(KEYS)})")
    for key in data:
        if key not in KEYS:
            shown = one_line(str(key), 60)
            raise InputError(f"{where}: unknown key {shown!r}; keys are {', '.join(KEYS)}")
    spec = _base(data, where)
    reads = _COMMON_FIELDS | KIND_KEYS[spec.kind]
    for key, (field, _, _) in _FIELDS.items():
        if key in data and field not in reads:
            raise InputError(f"{where}: {key}: kind {spec.kind!r} has no such parameter")
    changes = {
        field: _value(where, key, data[key], what, unit) for key, (field, what, unit) in _FIELDS.items() if key in data
    }
    try:
        return replace(spec, **changes)
    except InputError as exc:
        raise InputError(f"{where}: {str(exc).removeprefix('fabric: ')}") from exc


def _base(data: dict[str, Any], where: str) -> FabricSpec:
    """The preset or kind the file starts from."""
    if "preset" in data:
        if "kind" in data:
            raise InputError(f"{where}: kind: give either kind or preset (a preset fixes its kind)")
        name = data["preset"]
        if not isinstance(name, str) or name not in PRESETS:
            raise InputError(f"{where}: preset: must be one of {', '.join(PRESETS)}, not {_show(name)}")
        return preset(name)
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise InputError(f"{where}: kind: must be one of {', '.join(KINDS)} (or give a preset), not {_show(kind)}")
    return FabricSpec(kind=kind)


def _value(where: str, key: str, value: Any, what: str, unit: float) -> Any:
    """A file value checked for its kind and range, in the FabricSpec field's unit."""
    if what == "text":
        if not isinstance(value, str) or len(value) > 100:
            raise InputError(f"{where}: {key}: must be a string of at most 100 characters, not {_show(value)}")
        return value
    if what == "routing":
        if value not in ROUTINGS:
            raise InputError(f"{where}: {key}: must be one of {', '.join(ROUTINGS)}, not {_show(value)}")
        return value
    if what in ("count", "hosts"):
        limit = MAX_SWITCHES if what == "count" else 1 << 20
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limit:
            raise InputError(f"{where}: {key}: must be an integer in 1..{limit}, not {_show(value)}")
        return value
    low, high, zero = {"gbps": (0.0, MAX_GBPS, False), "latency": (0.0, MAX_LATENCY_US, True)}.get(
        what, (0.0, MAX_RATIO, False)
    )
    number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not number or value > high or value < low or (value == low and not zero):
        bound = f"in {'[' if zero else '('}{low:g}, {high:g}]"
        raise InputError(f"{where}: {key}: must be a number {bound}, not {_show(value)}")
    return float(value) * unit


def _show(value: Any) -> str:
    return one_line(repr(value), 60)


def read_mapping(path: Path, text: str) -> Any:
    """The content of a TOML, YAML or JSON file (by suffix; JSON otherwise), as Python values."""
    suffix = path.suffix.lower()
    if suffix == ".toml":
        return tomllib.loads(text)
    if suffix in (".yaml", ".yml"):
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError as exc:
            raise InputError(f"{path}: reading YAML needs PyYAML (pip install pyyaml); or write TOML or JSON") from exc
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(str(exc).splitlines()[0]) from exc
    return json.loads(text)
