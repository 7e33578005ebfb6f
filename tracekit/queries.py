"""The SQL questions in queries/*.sql: one question per file, a header saying what it answers.

Queries read the dataset's tables by name, never file paths; user values are bound parameters
(`$start`, `?`), never formatted into the text.
"""

from __future__ import annotations

from tracekit.resources import resource_dir


def query_names() -> list[str]:
    """Names of the shipped queries (file names without .sql)."""
    return sorted(p.stem for p in resource_dir("queries").glob("*.sql"))


def load_query(name: str) -> str:
    """The text of queries/<name>.sql."""
    path = resource_dir("queries") / f"{name}.sql"
    if not path.is_file():
        raise KeyError(f"no query {name!r}; queries are {', '.join(query_names())}")
    return path.read_text()


def query_header(name: str) -> dict[str, str]:
    """The `-- key: value` header of a query (name, answers, params, returns), continuation lines joined."""
    header: dict[str, str] = {}
    key = None
    for line in load_query(name).splitlines():
        if not line.startswith("--"):
            break
        text = line[2:].strip()
        if ":" in text and not line.startswith("--  "):
            key, value = text.split(":", 1)
            header[key.strip()] = value.strip()
        elif key:
            header[key] += " " + text
    return header
