"""Extension points as registries: every module of a package that defines a named object of a kind.

An extension point (an algorithm, a simulator format, a trace format) is one module defining one
object under a fixed name (`ALGORITHM`, `EMITTER`, ...); `discover` finds them all, by the object's
`name`, in module order, so adding one is adding its module, and every list the CLI and the docs
show is read from here.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType
from typing import Any, TypeVar

T = TypeVar("T")


def discover(package: ModuleType, attribute: str, kind: type[T]) -> dict[str, T]:
    """Every `attribute` of type `kind` defined by a module of `package`, by its `name`, in module order."""
    found: dict[str, T] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        value: Any = getattr(module, attribute, None)
        if isinstance(value, kind):
            found[str(value.name)] = value  # type: ignore[attr-defined]  # every kind has a name
    return found
