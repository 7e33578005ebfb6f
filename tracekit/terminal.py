"""Text from traces and datasets made safe to print with Rich: what a trace holds is data.

A job id, op name, label, path or error message may hold Rich markup (`[/]` aborts the print with a
MarkupError, `[bold]` restyles what follows) or terminal control sequences (ESC `[2J` clears the
screen, ESC `]0;...` retitles the window, C1 CSI does what ESC `[` does). `shown` makes such text
print as written: markup escaped, control characters as visible escapes (`\\x1b`).
"""

from __future__ import annotations

import re

# C0 controls but tab and line feed (messages keep their lines), DEL, C1 controls, and the Unicode
# format characters that reorder or hide text on a terminal (bidirectional overrides and isolates).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """`text` with its control characters written as escapes (`\\x1b`); for plain, unstyled output."""
    return _CONTROL.sub(_visible, text)


def shown(text: object) -> str:
    """`text` as Rich should print it: control characters as escapes, markup escaped (a trailing
    backslash too, which would otherwise escape the markup that follows it)."""
    from rich.markup import escape

    return escape(printable(str(text)))


# A table cell shows at most this many characters (a value of a hand-edited dataset can be megabytes).
MAX_CELL_CHARS = 1_000


def cell(text: str) -> str:
    """`text` as one line of a table cell: line feeds and tabs as escapes too, cut at MAX_CELL_CHARS
    with a note of how much is left out (csv and json outputs keep every character)."""
    if len(text) > MAX_CELL_CHARS:
        text = f"{text[:MAX_CELL_CHARS]}... ({len(text) - MAX_CELL_CHARS:,} more characters)"
    return shown(text.replace("\n", "\\n").replace("\t", "\\t"))
