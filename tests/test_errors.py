"""tracekit.errors: the text of an error about a file is one short line, always writable."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tracekit.errors import MAX_LINE_CHARS, MAX_MESSAGE_CHARS, MAX_WHERE_CHARS, ParserBug, TraceError, one_line


def test_a_huge_message_is_cut_to_one_short_line() -> None:
    exc = TraceError("bad value " + "x" * 8_000_000, "object 3 at " + "y" * 5000)
    assert len(exc.message) == MAX_MESSAGE_CHARS and exc.message.endswith("…")
    assert exc.where is not None and len(exc.where) == MAX_WHERE_CHARS
    assert len(exc.describe("trace.json")) <= MAX_LINE_CHARS
    assert str(exc) == exc.message


def test_line_breaks_and_control_characters_are_escaped() -> None:
    exc = TraceError("unknown NodeType 'a\nb\r\x00\x1b'", "line 1\ncolumn 2")
    assert exc.message == "unknown NodeType 'a\\nb\\r\\x00\\x1b'"
    assert exc.describe("x\n.json") == "x\\n.json at line 1\\ncolumn 2: " + exc.message


def test_surrogates_and_undecodable_names_are_escaped() -> None:
    # A lone surrogate from JSON, and a file name with a byte that is not UTF-8 (as os.fsdecode
    # gives it): both would make the error row unwritable.
    exc = TraceError("key '\ud800' is not valid", "object 1")
    line = exc.describe("trace-\udcff.json")
    line.encode("utf-8")
    assert line == "trace-\\udcff.json at object 1: key '\\ud800' is not valid"


def test_where_can_be_set_later_and_is_still_cleaned() -> None:
    exc = TraceError("bad")
    exc.where = "record 7\n" + "z" * 1000
    assert exc.where is not None and "\n" not in exc.where and len(exc.where) == MAX_WHERE_CHARS


@pytest.mark.parser_bug_expected
def test_a_parser_bug_is_a_trace_error_that_says_so() -> None:
    empty: dict[str, int] = {}
    try:
        empty["missing"]
    except KeyError as exc:
        bug = ParserBug.of(exc, "kineto")
    assert isinstance(bug, TraceError)
    assert bug.message.startswith("internal error in the kineto parser (KeyError: 'missing'; test_errors.py:")
    assert bug.message.endswith("please report")


@given(st.text(), st.one_of(st.none(), st.text()), st.text())
def test_any_text_gives_one_writable_bounded_line(message: str, where: str | None, display: str) -> None:
    line = TraceError(message, where).describe(display)
    line.encode("utf-8")
    assert "\n" not in line and "\r" not in line and len(line) <= MAX_LINE_CHARS


@given(st.text(), st.integers(min_value=1, max_value=600))
def test_one_line_is_at_most_its_limit(text: str, limit: int) -> None:
    out = one_line(text, limit)
    assert len(out) <= limit and out.isprintable()  # every control character, break, surrogate escaped
    assert len(out.splitlines()) <= 1
    if text.isprintable() and len(text) <= limit:
        assert out == text
