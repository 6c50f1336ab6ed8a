"""``python -m cairn.demo``: the demo, or (with ``--child``) its worker process."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m cairn.demo",
        description="Run a 30-app review batch with a simulated agent and ad platform, "
        "SIGKILL its worker part way, run it again, and count every step's runs.",
    )
    parser.add_argument(
        "--workdir", type=Path, help="where to keep the store (default: a new temp dir)"
    )
    parser.add_argument("--apps", type=int, default=30, help="apps to review (default: 30)")
    parser.add_argument("--seed", type=int, help="picks the moment of the kill (default: random)")
    # The worker process the demo starts and kills; not for people.
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--batch", help=argparse.SUPPRESS)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.child:
        from cairn.demo.batch import DemoFiles, run_worker

        if args.workdir is None or args.batch is None:
            raise SystemExit("--child needs --workdir and --batch")
        return 0 if run_worker(DemoFiles(args.workdir), args.batch, args.apps).ok else 1
    from cairn.demo import run_demo

    return run_demo(args.workdir, apps=args.apps, seed=args.seed)


if __name__ == "__main__":
    sys.exit(main())
