"""Stages of the fabric what-if and the fleet replay, each against a baseline measured in the same run.

* whatif: a synthetic 128-rank job (bench/bench_replay.py's mix of ring all-reduce, all-gather,
  reduce-scatter and all-to-all) timed on a two-tier Clos and a rail-optimised fabric, ECMP over 4
  seeds and spraying, against decomposing it alone (what the flows cost before any timing).
* fleet-replay: `tracekit replay --fleet`'s work on the generated fleet (every job replayed and
  timed on both default fabrics, two routings), 2 workers, against ingesting the same fleet with 2
  workers; the row projects the 30,000-job fleet from the jobs/s measured (the issue's target:
  <= 10 minutes, peak RSS < 2 GB).
"""

from __future__ import annotations

from bench.suite import Context, Row, probe, ratio_row, stage

FLEET_TARGET_JOBS = 30_000
FLEET_TARGET_S = 600


@stage("whatif", "a 128-rank job timed on two fabrics x (ECMP over 4 seeds, spray), against its decomposition")
def whatif_stage(ctx: Context) -> list[Row]:
    ranks, collectives = (16, 8) if ctx.quick else (128, 40)
    args = {"ranks": ranks, "collectives": collectives}
    base = probe("whatif", args | {"decompose_only": True})
    timed = probe("whatif", args)
    flows = timed.counts["flows"]
    return [
        ratio_row(
            "whatif",
            f"{ranks} ranks, {collectives} collectives, 10 runs",
            timed,
            base,
            "its decomposition alone",
            amount=flows * 10,
            unit="flows timed",
            target="a 128-rank job in seconds",
        )  # fmt: skip
    ]


@stage("fleet-replay", "`tracekit replay --fleet` on the generated fleet, 2 workers, against ingesting it")
def fleet_replay_stage(ctx: Context) -> list[Row]:
    jobs = ctx.fleet_jobs
    dataset = ctx.dataset(jobs)
    ingest = probe("ingest", {"paths": [str(ctx.fleet(jobs))], "out": str(ctx.fresh("fleet-replay-ingest")),
                              "workers": 2})  # fmt: skip
    replayed = probe("fleet_replay", {"dataset": str(dataset), "workers": 2})
    row = ratio_row("fleet-replay", f"{jobs:,} jobs, 2 workers", replayed, ingest, "ingest, 2 workers",
                    amount=jobs, unit="jobs", of="wall")  # fmt: skip
    projected = replayed.wall / max(jobs, 1) * FLEET_TARGET_JOBS
    row.target = f"30,000 jobs <= 10 min: projected {projected / 60:,.1f} min"
    row.met = projected <= FLEET_TARGET_S and replayed.peak_mib < 2048
    return [row]
