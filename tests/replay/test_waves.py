"""The waves timing's plans (tracekit.replay.waves): shared between shapes of one structure, never
changing a result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tracekit
from tracekit.fabric.presets import preset
from tracekit.replay import Placement, timing, waves
from tracekit.replay.fleet import FleetSettings, replay_jobs
from tracekit.replay.shapes import JobShapes
from tracekit.replay.timing import Timer

PLACEMENT = Placement(gpus_per_host=2)  # the captured jobs' 4 ranks on 2 hosts: traffic crosses the network


def _shapes(dataset: Path, job: str) -> JobShapes:
    from tracekit.replay.collectives import load_jobs
    from tracekit.replay.decompose import decompose
    from tracekit.replay.shapes import job_shapes

    with tracekit.open(dataset) as ds:
        [(_, matched)] = list(load_jobs(ds, [job]))
    assert not isinstance(matched, Exception)
    parts = decompose(matched, PLACEMENT, unique=True)
    comm_type = dict(zip(matched.collectives["collective_id"].to_list(), matched.collectives["comm_type"].to_list(),
                         strict=True))  # fmt: skip
    return job_shapes(job, matched.world_size, parts, comm_type, PLACEMENT)


def test_a_shape_of_the_same_structure_and_other_sizes_is_timed_as_if_alone(captured_dataset: Path) -> None:
    shapes = _shapes(captured_dataset, "fsdp_mlp")
    network = preset("clos2-2to1").build(shapes.network())
    waves.PLANS.clear()
    alone = Timer(shapes).run(network, "ecmp", 3)
    assert waves.PLANS  # the plans are kept ...
    for shape in shapes.shapes:  # ... and another job with the same groups and three times the bytes
        shape.flows["bytes"] = shape.flows["bytes"] * 3
    shared = Timer(shapes).run(network, "ecmp", 3)
    waves.PLANS.clear()
    fresh = Timer(shapes).run(network, "ecmp", 3)
    for (s1, e1, t1), (s2, e2, t2) in zip(shared.solved, fresh.solved, strict=True):
        assert np.array_equal(s1, s2) and np.array_equal(e1, e2) and t1 == t2
    assert np.array_equal(shared.link_bytes, fresh.link_bytes)
    assert shared.communication_s(shapes) > alone.communication_s(shapes)  # the sizes did count


def test_a_fleets_rows_do_not_depend_on_what_its_worker_timed_before(captured_dataset: Path) -> None:
    settings = FleetSettings(PLACEMENT, fabrics=(preset("clos2-2to1"),), seeds=2)
    with tracekit.open(captured_dataset) as ds:
        jobs = [row[0] for row in ds.sql("select job_id from jobs order by job_id").fetchall()]
        waves.PLANS.clear()
        together = {o.job: o.fabrics for o in replay_jobs(ds, jobs, settings)}
        for job in jobs:
            waves.PLANS.clear()
            [alone] = list(replay_jobs(ds, [job], settings))
            timed = together[job]
            if alone.fabrics is None or timed is None:
                assert alone.fabrics is None and timed is None
            else:
                assert alone.fabrics.equals(timed)


def test_a_plan_is_not_reused_under_other_nccl_latencies(
    captured_dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by the simulator validation in CI: it times the model with NCCL's latencies zeroed after
    # timing it with them, and the plans kept from the first run (latencies included) came back.
    from tracekit.replay.nccl import tuning

    shapes = _shapes(captured_dataset, "fsdp_mlp")
    network = preset("clos2-2to1").build(shapes.network())
    waves.PLANS.clear()
    with_latency = Timer(shapes).run(network, "ecmp", 0).communication_s(shapes)
    zero = {link: {alg: (0.0, 0.0, 0.0) for alg in table} for link, table in tuning.HW_LATENCY.items()}
    monkeypatch.setattr(tuning, "HW_LATENCY", zero)
    after_a_warm_run = Timer(shapes).run(network, "ecmp", 0).communication_s(shapes)
    waves.PLANS.clear()
    fresh = Timer(shapes).run(network, "ecmp", 0).communication_s(shapes)
    assert after_a_warm_run == fresh < with_latency


def test_the_plan_cache_keeps_its_bytes_under_its_budget(captured_dataset: Path) -> None:
    shapes = _shapes(captured_dataset, "fsdp_mlp")
    network = preset("clos2-2to1").build(shapes.network())
    plans = [waves.WavePlan.build(*_routed(shape, network)) for shape in shapes.shapes]
    sizes = [plan.nbytes() for plan in plans]
    cache = waves.PlanCache(budget=4 * max(sizes))
    for i, plan in enumerate(plans * 3):
        cache.put(bytes([i]), plan)
        assert cache._bytes <= cache.budget and cache._bytes == sum(size for _, size in cache._plans.values())
    assert cache.get(bytes([0])) is None and len(cache) >= 1  # the oldest went first
    cache.clear()
    assert len(cache) == 0 and cache._bytes == 0


def _routed(shape: object, network: object) -> tuple[object, object, object, object, object, object]:
    flows = shape.flows  # type: ignore[attr-defined]
    incidence, latency = timing._routing_and_latency(flows, "ring", "Simple", network, "ecmp", 0, "nvlink")  # type: ignore[arg-type]
    return incidence, network.capacity_Bps, latency, flows["step"], flows["dep_ptr"], flows["dep_idx"]  # type: ignore[attr-defined]
