"""The fuzzing smoke campaign: a few thousand mutated traces through `tracekit.parse_file`.

Each input is a sample trace (and a public one, where ../shared is present) mutated by bench.fuzz:
bit flips, truncation, zero runs, structural JSON edits, type swaps, huge and non-finite numbers,
deep nesting, lone surrogates, inconsistent ranks, groups and splits, Chakra record edits, gzip.
Every input must give rows or a TraceError with a one-line, bounded, writable message, within 10 s
and 1 GiB. The seed is fixed, so the run is the same every time (TRACEKIT_FUZZ_SEED picks
another); `python -m bench.fuzz --inputs N` runs any number on demand.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from bench.fuzz import seeds
from bench.fuzz.mutate import MAX_INPUT_BYTES, _copies
from bench.fuzz.runner import Inputs, _cpu_seconds, check_message, parse_one, run_campaign, save_findings

SMOKE_INPUTS = 3_000

pytestmark = pytest.mark.fuzz


def test_fuzz_smoke_campaign_finds_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("TRACEKIT_FUZZ_SEED", "0"))
    campaign = run_campaign(SMOKE_INPUTS, seed=seed, workers=2, timeout=10.0, max_rss_mb=1024.0)
    print(campaign.table())
    assert campaign.inputs == SMOKE_INPUTS
    if campaign.findings:
        save_findings(campaign, tmp_path)
        found = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("*.finding.json"))]
        details = "\n".join(f"{f['format']} {f['outcome']}: {f['detail'][:200]} ({f['steps']})" for f in found[:10])
        pytest.fail(f"{len(found)} finding(s) in {tmp_path}, re-made by seed {seed}:\n{details}")


def test_seeds_need_no_shared_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(seeds, "PUBLIC", tmp_path / "absent")
    found = seeds.load_seeds(0)
    assert {s.format for s in found} == set(seeds.FORMATS)
    assert all(not s.name.startswith(("astra-sim", "hta-", "param-")) for s in found)


def test_the_contract_a_finding_breaks() -> None:
    assert check_message("x.json at byte 0: bad") is None
    assert check_message("two\nlines") == "message spans several lines"
    assert check_message("x" * 501) == "message of 501 characters"
    assert check_message("\ud800") == "message cannot be written as UTF-8"
    assert parse_one("t.json", b"{}")[0] == "trace_error"
    assert parse_one("t.0.et", b"")[0] == "trace_error"


def test_an_input_is_the_same_whichever_process_makes_it_and_when() -> None:
    # Workers make their own inputs and the parent re-makes a finding's: they must agree. Mutable
    # values shared between inputs (which once made a cycle) and gzip's header time broke that.
    inputs = Inputs(5, tuple(seeds.FORMATS))
    made = {i: inputs.make(i) for i in range(60)}
    assert all(inputs.make(i).data == made[i].data for i in reversed(range(60)))
    gzipped = [m.data for m in made.values() if "gzip" in m.steps]
    assert gzipped and all(data[4:8] == bytes(4) for data in gzipped)  # no time in the header


def test_time_is_the_cpu_a_process_spends_not_the_wall_clock() -> None:
    # A loaded shared machine once stretched two 0.3 s parses past 10 s of wall time at once.
    before = _cpu_seconds(os.getpid())
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    assert 0.2 < _cpu_seconds(os.getpid()) - before < 5


def test_duplications_are_cut_before_they_are_made() -> None:
    # The campaign's 100,000 dependencies in a record, then the record 1,000 times: a 1 GB input
    # made (and then undone) in the worker, which the memory bound took for the parser's.
    assert _copies(1000, 1_000_000) == MAX_INPUT_BYTES // 1_000_000
    assert _copies(1000, 1_000_000, MAX_INPUT_BYTES) == 1 and _copies(2, 10) == 2
    if seeds.PUBLIC.is_dir():  # the input itself is made from a public trace
        # The formats of the campaign that made it (input i's format depends on how many take turns).
        grown = Inputs(2026, ("chakra_et", "chakra_json", "pytorch_et", "kineto")).make(76_144)
        assert len(grown.data) <= MAX_INPUT_BYTES and "et: duplicate record 0 x32" in grown.steps
