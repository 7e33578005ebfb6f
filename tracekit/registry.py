"""Extension points as registries: every module of a package that defines a named object of a kind,
and every installed plugin that adds one.

An extension point (an algorithm, a simulator format, a trace format) is one module defining one
object under a fixed name (`ALGORITHM`, `EMITTER`, `PARSER`, ...). `discover` finds them all, by the
object's `name`, in module order, then the plugins: Python packages that declare an entry point in
the group `tracekit.<attribute in lower case>` (e.g. `tracekit.emitter`), named for the object and
pointing at the module that defines it, as in a plugin's pyproject.toml:

    [project.entry-points."tracekit.emitter"]
    mysim = "tracekit_mysim.emitter"

So adding one is adding its module, here or in a plugin, and every list the CLI and the docs show is
read from here. A built-in module's name is its object's name (`halving_doubling.py` defines
`halving-doubling`, `chakra_et.py` the format `chakra_et`; a test holds every registry to it), which
lets `names` list a registry for the CLI's choices without importing its modules: `tracekit --help`
stays fast though the emitters import numpy. A plugin that fails to load, defines no such object,
names it differently from its entry point, or takes a built-in's name is skipped with a
`PluginWarning` saying which and why.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, TypeVar

T = TypeVar("T")

_PACKAGE_ROOT = Path(__file__).resolve().parent


class PluginWarning(UserWarning):
    """An installed plugin could not be used (the message names it and says why)."""


class Plugin(NamedTuple):
    group: str  # the entry-point group, tracekit.<kind>
    name: str  # the entry point's name: the object's name
    value: str  # the module (or module:object) it points at
    distribution: str  # the installed package that declares it


def group_of(attribute: str) -> str:
    """The entry-point group of an extension point: `EMITTER` -> `tracekit.emitter`."""
    return f"tracekit.{attribute.lower()}"


def discover(package: ModuleType, attribute: str, kind: type[T]) -> dict[str, T]:
    """Every `attribute` of type `kind` defined by a module of `package`, by its `name`, in module
    order, then every plugin's, in name order."""
    found: dict[str, T] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        value: Any = getattr(module, attribute, None)
        if value is not None and isinstance(value, kind):
            found[str(value.name)] = value  # type: ignore[attr-defined]  # every kind has a name
    for plugin in plugins(group_of(attribute)):
        loaded = _load(plugin, attribute, kind, taken=found)
        if loaded is not None:
            found[plugin.name] = loaded
    return found


def names(package: str, attribute: str, dashes: bool = True) -> tuple[str, ...]:
    """The names `discover` finds for `package` (a dotted name under tracekit), without importing any of
    its modules: the built-in ones, then the plugins' entry points (a plugin that will not load is
    dropped only when it is used)."""
    built_in = built_in_names(package, attribute, dashes)
    extra = [p.name for p in plugins(group_of(attribute)) if p.name not in built_in]
    return (*built_in, *sorted(set(extra)))


def built_in_names(package: str, attribute: str, dashes: bool = True) -> tuple[str, ...]:
    """The modules of `package` whose source defines `attribute`, by file name (with `_` read as `-`
    when the registry's names are written with dashes)."""
    folder = _PACKAGE_ROOT.joinpath(*package.split(".")[1:])
    defines = re.compile(rf"^{attribute}\b\s*[:=]", re.MULTILINE)
    return tuple(
        path.stem.replace("_", "-") if dashes else path.stem
        for path in sorted(folder.glob("*.py"), key=lambda p: p.stem)
        if not path.stem.startswith("_") and defines.search(path.read_text(encoding="utf-8"))
    )


@dataclass(frozen=True)
class ExtensionPoint:
    kind: str  # what one is, for people
    package: str  # where the built-in ones live
    attribute: str  # the object each of its modules defines
    dashes: bool = True  # its names are written with `-` where the module's has `_` (a format's keep `_`)


# Every registry of tracekit, for `tracekit plugins` and the tests that hold each to its conventions.
EXTENSION_POINTS = (
    ExtensionPoint("trace format", "tracekit.parsers.formats", "PARSER", dashes=False),
    ExtensionPoint("simulator format", "tracekit.replay.emitters", "EMITTER"),
    ExtensionPoint("algorithm", "tracekit.replay.algorithms", "ALGORITHM"),
    ExtensionPoint("report chart", "tracekit.report.charts", "CHART"),
)


class Extension(NamedTuple):
    kind: str
    name: str
    source: str  # "built-in", or the distribution of the plugin that adds it
    summary: str


def extensions() -> list[Extension]:
    """Every extension of every registry, built-in and plugin, loading them all (warnings for broken plugins)."""
    found = []
    for point in EXTENSION_POINTS:
        built_in = built_in_names(point.package, point.attribute, point.dashes)
        by_name = {p.name: p.distribution for p in plugins(group_of(point.attribute))}
        for name, value in discover(importlib.import_module(point.package), point.attribute, object).items():
            source = "built-in" if name in built_in else by_name.get(name, "?")
            summary = str(getattr(value, "summary", "")).strip().split("\n\n")[0]
            found.append(Extension(point.kind, name, source, " ".join(summary.split())))
    return found


def plugins(group: str) -> tuple[Plugin, ...]:
    """The entry points installed packages declare in `group`, by name."""
    return tuple(p for p in _installed_plugins() if p.group == group)


@cache
def _installed_plugins() -> tuple[Plugin, ...]:
    """Every tracekit entry point of the installed packages, read once per process (reading them walks
    every installed distribution: tens of milliseconds, which the CLI pays at start)."""
    from importlib.metadata import distributions

    found = {
        Plugin(ep.group, ep.name, ep.value, dist.name)
        for dist in distributions()
        for ep in dist.entry_points
        if ep.group.startswith("tracekit.")
    }
    return tuple(sorted(found))


def _load(plugin: Plugin, attribute: str, kind: type[T], taken: Mapping[str, object]) -> T | None:
    """The plugin's object, or None after a warning saying why it cannot be used."""
    value, problem = _try_load(plugin, attribute, kind, taken)
    if problem is not None:
        where = f"plugin {plugin.name!r} ({plugin.value}, from {plugin.distribution}, entry point group {plugin.group})"
        warnings.warn(f"{where} {problem}", PluginWarning, stacklevel=3)
    return value


def _try_load(
    plugin: Plugin, attribute: str, kind: type[T], taken: Mapping[str, object]
) -> tuple[T | None, str | None]:
    if plugin.name in taken:
        return None, f"is skipped: a built-in {attribute} has that name"
    try:
        module_name, _, object_name = plugin.value.partition(":")
        loaded: Any = importlib.import_module(module_name.strip())
        value = getattr(loaded, object_name.strip() or attribute, None)
    except Exception as exc:  # a broken plugin must not stop the tool; the warning names it
        return None, f"failed to load: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if value is None or not isinstance(value, kind):
        return None, f"defines no {attribute} of type {kind.__name__}"
    if getattr(value, "name", None) != plugin.name:
        return None, f"names its {attribute} {getattr(value, 'name', None)!r}, not {plugin.name!r}"
    return value, None
