"""python -m bench.fuzz [--inputs N] [--seed S] [--workers W] [--timeout SEC] [--max-rss-mb MB] [--out DIR]"""

from __future__ import annotations

import argparse
import sys
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    sys.exit(main())
