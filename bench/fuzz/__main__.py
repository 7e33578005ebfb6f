"""python -m bench.fuzz [--inputs N] [--seed S] [--workers W] [--timeout SEC] [--max-rss-mb MB] [--out DIR]
python -m bench.fuzz --datasets [--inputs N] [--seed S] [--first I] [...]: mutated datasets (bench.fuzz.datasets)
python -m bench.fuzz --datasets --seed S --case I: that one case, run here, with all it printed"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench.fuzz.runner import default_workers, run_campaign, save_findings
from bench.fuzz.seeds import FORMATS


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__doc__)
    parser.add_argument("--inputs", type=int, default=10_000, help="mutated inputs to parse (default 10,000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed: the same seed gives the same inputs")
    parser.add_argument("--workers", type=int, default=default_workers(), help="parser processes")
    parser.add_argument(
        "--timeout",
        type=float,
        default=10.0,
        help="CPU seconds one input's parse may take (a hang: 10x on the wall clock)",
    )
    parser.add_argument("--max-rss-mb", type=float, default=1024.0, help="resident memory one input may reach")
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated formats to fuzz")
    parser.add_argument("--out", type=Path, default=Path("fuzz-findings"), help="where findings are saved")
    parser.add_argument("--datasets", action="store_true", help="mutate an ingested dataset, not trace bytes")
    parser.add_argument("--first", type=int, default=0, help="with --datasets: the number of the first case")
    parser.add_argument("--case", type=int, default=None, help="with --datasets: run this one case and show it")
    args = parser.parse_args()
    if args.datasets:
        return _datasets(args)
    formats = tuple(f for f in args.formats.split(",") if f)
    last = [0]

    def progress(campaign) -> None:  # type: ignore[no-untyped-def]
        if campaign.inputs - last[0] >= 1000:
            last[0] = campaign.inputs
            print(f"  {campaign.inputs:,} inputs, {len(campaign.findings)} findings", file=sys.stderr, flush=True)

    campaign = run_campaign(
        args.inputs,
        seed=args.seed,
        workers=args.workers,
        timeout=args.timeout,
        max_rss_mb=args.max_rss_mb,
        formats=formats,
        progress=progress,
    )
    print(campaign.table())
    if campaign.findings:
        save_findings(campaign, args.out)
        print(f"findings saved in {args.out}/ (input + .json each)")
    return 1 if campaign.findings else 0


def _datasets(args: argparse.Namespace) -> int:
    from bench.fuzz.datasets import run_dataset_campaign, run_one, save_dataset_findings

    if args.case is not None:
        print(run_one(args.seed, args.case))
        return 0
    step = max(100, args.inputs // 20)
    last, shown = [0], [0]

    def progress(campaign) -> None:  # type: ignore[no-untyped-def]
        new = campaign.findings[shown[0] :]  # each finding as it is found, and kept
        for case, result in new:
            print(f"  finding: case {case.index}: {case.kind} {result.outcome}: {result.detail[:200]}", file=sys.stderr)
        if new:
            save_dataset_findings(campaign, args.out, first=shown[0])
            shown[0] = len(campaign.findings)
        if campaign.cases - last[0] >= step:
            last[0] = campaign.cases
            rate = campaign.cases / max(time.perf_counter() - started, 1e-9)
            print(
                f"  {campaign.cases:,} cases ({rate:.1f}/s), {len(campaign.findings)} findings",
                file=sys.stderr,
                flush=True,
            )

    started = time.perf_counter()
    campaign = run_dataset_campaign(
        args.inputs,
        seed=args.seed,
        workers=args.workers,
        timeout=args.timeout,
        max_rss_mb=args.max_rss_mb,
        first=args.first,
        progress=progress,
    )
    print(campaign.table())
    if campaign.findings:
        print(campaign.report_findings())
        save_dataset_findings(campaign, args.out)
        print(f"findings saved in {args.out}/ (a .case.json each)")
    return 1 if campaign.findings else 0


if __name__ == "__main__":
    sys.exit(main())
