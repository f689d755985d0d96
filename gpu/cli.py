"""The ``ridgefill`` command line."""
from __future__ import annotations

import argparse
import sys

from importlib.metadata import version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ridgefill", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ridgefill {version('ridgefill')}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("demo", help="fit maps on first run and answer a needle prompt exact vs RidgeFill")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    print(f"ridgefill {args.command}: not built yet", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
