"""The fuzzing smoke campaign: a few thousand mutated traces through `tracekit.parse_file`.

Each input is a sample trace (and a public one, where ../shared is present) mutated by bench.fuzz:
bit flips, truncation, zero runs, structural JSON edits, type swaps, huge and non-finite numbers,
deep nesting, lone surrogates, inconsistent ranks, groups and splits, Chakra record edits, gzip.
Every input must give rows or a TraceError with a one-line, bounded, writable message, within 10 s
and 1 GiB. The seed is fixed, so the run is the same every time (TRACEKIT_FUZZ_SEED picks
another); `python -m bench.fuzz --inputs N` runs any number on demand.

The dataset mode (bench.fuzz.datasets) mutates an ingested dataset's values instead and runs the
shipped queries, `tracekit query`, `replay` (one job and --fleet) and `report` on it: every case must
end in rows or a one-line error with a documented exit code, print no wrapped negative byte count,
within 10 s and 1 GiB (`python -m bench.fuzz --datasets --inputs N` on demand).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from bench.fuzz import datasets, seeds
from bench.fuzz.mutate import MAX_INPUT_BYTES, _copies
from bench.fuzz.runner import Inputs, _cpu_seconds, check_message, parse_one, run_campaign, save_findings

SMOKE_INPUTS = 3_000
# One block of the dataset mode's cases: every command its share of times (report and fleet too).
DATASET_CASES = datasets.KIND_BLOCK

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


@pytest.fixture(scope="module")
def base_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dataset mode's base: the sample traces ingested, a fleet replay stored (about 15 s)."""
    return datasets.build_base(tmp_path_factory.mktemp("dsfuzz"))


def test_dataset_fuzz_smoke_campaign_finds_nothing(base_dataset: Path, tmp_path: Path) -> None:
    seed = int(os.environ.get("TRACEKIT_FUZZ_SEED", "0"))
    campaign = datasets.run_dataset_campaign(
        DATASET_CASES, seed=seed, workers=2, workdir=tmp_path, base_root=base_dataset
    )
    print(campaign.table())
    assert campaign.cases == DATASET_CASES and {kind for kind, _ in campaign.counts} == set(datasets.KINDS)
    if campaign.findings:
        datasets.save_dataset_findings(campaign, tmp_path / "findings")
        saved = tmp_path / "findings"
        pytest.fail(f"{len(campaign.findings)} finding(s), saved in {saved}:\n{campaign.report_findings(5)}")


def test_a_dataset_case_is_made_the_same_way_by_any_process(base_dataset: Path, tmp_path: Path) -> None:
    # Workers make their own cases and the parent re-makes a finding's to report it: they must agree,
    # and the rerun a finding prints (--seed S --case I) must make the same case.
    base = datasets.describe(base_dataset)
    made = [datasets.make_case(base, 3, i) for i in range(200)]
    again = datasets.describe(base_dataset)
    assert [datasets.make_case(again, 3, i) for i in reversed(range(200))] == made[::-1]
    assert {c.kind for c in made} == set(datasets.KINDS)
    assert all(c.statements and c.describe() for c in made)
    dataset, refused = datasets.prepare(made[0], base, tmp_path / "scratch")
    assert (dataset / "tracekit.duckdb").is_file() and len(refused) <= len(made[0].statements)


def test_what_a_dataset_case_counts_as_a_wrapped_total() -> None:
    found = datasets._NEGATIVE_BYTES
    assert found.search("job j: 12 flows, -1.5 GiB between hosts") and found.search("total −3 bytes")
    assert found.search("in_bytes -9,223 B")
    assert not found.search("1.5 GiB, job-000001 12 B") and not found.search("p2p-1 4 KiB")
    assert not found.search("x-1 B")
