"""Where the project's declared files (schemas/, queries/) are found.

They live at the top of the repository so that users read them there; a wheel carries them inside
the package as tracekit/_data/ (see pyproject.toml), an editable install reads the repository.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """Return the folder `name` ('schemas', 'queries' or 'sample_traces') of this installation."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"tracekit installation is missing its {name}/ folder")
