"""A mutation fuzzer for tracekit's parsers: `python -m bench.fuzz --inputs 100000`.

Seeds are real traces (the bundled samples, ../shared/traces/public where present, and Chakra JSON
made from the .et seeds the way chakra_jsonizer writes it). Each input is one seed mutated by a few
operators (bit flips, truncation, zero runs, structural JSON edits, type swaps, huge and
non-finite numbers, deep nesting, lone surrogates, inconsistent ranks/groups/splits, Chakra
record edits), gzipped about 15% of the time, and given to `tracekit.parse_file` in a worker
process that is killed past a time or memory bound.

The contract checked for every input: `parse_file` returns, or raises `TraceError` with a
one-line message of bounded length that is writable as UTF-8; within the time bound; under the
memory bound. Anything else is a finding, saved with the seed and mutations that made it.
"""
