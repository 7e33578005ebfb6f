"""A dump's bytes as plain Python values (dicts, lists, tuples, strings, numbers, booleans, None),
running none of its code.

Pickle. Flight Recorder pickles are written by c10d's own pickler (`torch::jit::pickle_str` of
IValues: PROTO 2, dicts, lists, tuples, strings, ints, floats, booleans, None, memo puts and gets;
no GLOBAL, REDUCE or any other opcode that loads or calls a Python object: checked on every dump
of `sample_traces/flight_recorder`, torch 2.13.0). They are read by `pickle._Unpickler`, the
pure-Python unpickler, with a dispatch table of the data opcodes only (those, and the ones Python's
own pickler uses for the same types at protocols 0 to 5, for a dump loaded and saved again):

* every opcode that could load or call code (GLOBAL, STACK_GLOBAL, REDUCE, BUILD, INST, OBJ,
  NEWOBJ, NEWOBJ_EX, EXT1/2/4, PERSID, BINPERSID, buffers) is refused before it acts, and
  `find_class` refuses every module and name, so nothing but data can be built whatever path a
  future pickle takes: a dump holding `os.system` is a one-line error naming it and runs nothing;
* the memo is a dict: a memo index read from the file sizes nothing. (The C unpickler keeps its
  memo in an array sized by the largest index: an 8-byte pickle putting at index 2**26 costs it
  1 GiB, measured with CPython 3.11. No cheap look at the bytes can rule that out, since the byte
  of LONG_BINPUT is a letter of every dump's strings, so the C unpickler is not used: the data path
  takes 0.8 s for a 2,000-entry dump of 1.2 MB, the C one 0.2 s; building the rows, 0.3 s.)
* the pickle is decoded whole only up to `memory_budget() / PICKLE_FACTOR` bytes (a pickle refers
  to an object in one or two bytes, which costs eight in memory), and past DENSE_OBJECTS containers
  a pickle making more than one per MIN_OBJECT_BYTES bytes read is refused as it is read (real
  dumps: one per 17-19 bytes), with the rules of tracekit.parsers.common.limits.

JSON (`_dump_fr_trace_json`, `_dump_nccl_trace_json`) is read by tracekit.parsers.common.limits'
guarded reader and `json`. Anything else, a truncated pickle, an opcode no dump writes, JSON that
does not parse, is one TraceError naming the place (byte offset).
"""

from __future__ import annotations

import io
import json
import pickle
import pickletools
from collections.abc import Callable
from typing import Any

from tracekit.parsers.base import Source, TraceError
from tracekit.parsers.common.limits import (
    DENSE_OBJECTS,
    MIN_OBJECT_BYTES,
    memory_budget,
    read_json_document,
    too_deep,
)

PICKLE_FACTOR = 16
# The opcodes of the values a dump holds (by pickletools' names).
_DATA_OPCODES = frozenset(
    """PROTO FRAME STOP MARK POP POP_MARK DUP NONE NEWTRUE NEWFALSE INT BININT BININT1 BININT2 LONG
    LONG1 LONG4 FLOAT BINFLOAT STRING BINSTRING SHORT_BINSTRING UNICODE BINUNICODE SHORT_BINUNICODE
    BINUNICODE8 EMPTY_LIST APPEND APPENDS LIST EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_DICT DICT
    SETITEM SETITEMS GET BINGET LONG_BINGET PUT BINPUT LONG_BINPUT MEMOIZE""".split()
)
# The opcodes that make a container: counted against the density rule.
_CONTAINER_OPCODES = frozenset("EMPTY_LIST LIST EMPTY_TUPLE TUPLE TUPLE1 TUPLE2 TUPLE3 EMPTY_DICT DICT".split())
# Refused by find_class (which then names what the pickle wanted).
_GLOBAL_OPCODES = frozenset(("GLOBAL", "STACK_GLOBAL"))
_OPCODE_NAMES = {ord(op.code): op.name for op in pickletools.opcodes}


class _Refused(Exception):
    """The pickle asks for something a dump never holds (the message says what)."""


def read_document(source: Source) -> tuple[Any, int]:
    """The dump's document (a pickle or a JSON object) and the bytes it was decoded from."""
    with source.open() as stream:
        head = stream.read(1 << 16).lstrip()
    if head[:1] == b"{":
        return _decode_json(source)
    if head[:1] == b"\x80":
        return _decode_pickle(source)
    raise TraceError("not a Flight Recorder dump: neither a pickle nor a JSON object", "byte 0")


def _decode_json(source: Source) -> tuple[Any, int]:
    data = read_json_document(source)
    try:
        return json.loads(data), len(data)
    except RecursionError:
        raise too_deep() from None
    except (ValueError, UnicodeDecodeError) as exc:
        where = f"byte offset {exc.pos}" if isinstance(exc, json.JSONDecodeError) else None
        raise TraceError(f"invalid JSON: {exc.msg if isinstance(exc, json.JSONDecodeError) else exc}", where) from None


def _decode_pickle(source: Source) -> tuple[Any, int]:
    limit = memory_budget() // PICKLE_FACTOR
    with source.open() as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise TraceError(
            f"pickle longer than {limit:,} bytes (the memory budget / {PICKLE_FACTOR}): not decoded "
            "(a Flight Recorder dump of 2,000 entries takes a few MB)"
        )
    buffer = io.BytesIO(data)
    unpickler = _DataUnpickler(buffer)
    try:
        return unpickler.load(), len(data)
    except _Refused as exc:
        raise TraceError(
            f"{exc}: not read (a Flight Recorder dump holds only data)", f"byte offset {unpickler.at}"
        ) from None
    except EOFError:
        raise TraceError("pickle truncated (no STOP opcode)", f"byte offset {len(data)}") from None
    except RecursionError:
        raise too_deep() from None
    except MemoryError:
        raise
    except Exception as exc:  # the pure-Python unpickler raises what its opcodes meet: all one error
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise TraceError(f"unreadable pickle ({detail})", f"byte offset {unpickler.at}") from None


def _refuse(name: str) -> Callable[[_DataUnpickler], None]:
    def refused(self: _DataUnpickler) -> None:
        raise _Refused(f"pickle opcode {name}, which loads or calls a Python object")

    return refused


def _counted(load: Callable[[Any], None]) -> Callable[[_DataUnpickler], None]:
    def counted(self: _DataUnpickler) -> None:
        self.containers += 1
        if self.containers > DENSE_OBJECTS and self.containers * MIN_OBJECT_BYTES > self.at:
            raise _Refused(
                f"{self.containers:,} containers in the first {self.at:,} bytes, fewer than {MIN_OBJECT_BYTES} bytes "
                "each (a dump's average is 17 or more)"
            )
        load(self)

    return counted


def _unknown(code: int) -> Callable[[_DataUnpickler], None]:
    def unknown(self: _DataUnpickler) -> None:
        raise _Refused(f"byte 0x{code:02x}, which is no pickle opcode")

    return unknown


def _dispatch() -> dict[int, Callable[..., None]]:
    """Every byte's action: the data opcodes' loads, a refusal for the rest."""
    loads = pickle._Unpickler.dispatch
    table: dict[int, Callable[..., None]] = {}
    for code in range(256):
        name = _OPCODE_NAMES.get(code)
        load = loads.get(code)
        if name is None or load is None:
            table[code] = _unknown(code)
        elif name in _CONTAINER_OPCODES:
            table[code] = _counted(load)
        elif name in _DATA_OPCODES or name in _GLOBAL_OPCODES:
            table[code] = load
        else:
            table[code] = _refuse(name)
    return table


class _DataUnpickler(pickle._Unpickler):
    """The pure-Python unpickler with the data opcodes only (see the module docstring)."""

    dispatch = _dispatch()

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file)
        self._file = file
        self.containers = 0

    @property
    def at(self) -> int:
        return self._file.tell()

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"pickle global {str(module)[:60]}.{str(name)[:60]}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("pickle persistent id")
