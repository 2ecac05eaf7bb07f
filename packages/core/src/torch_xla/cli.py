"""The `torch-xla` command."""

from __future__ import annotations

import argparse
import sys

from torch_xla.plugins import PluginError


def _plugins(args: argparse.Namespace) -> int:
    from torch_xla.plugins import listing

    print(listing.describe())
    if args.devices:
        try:
            print(listing.describe_devices())
        except (PluginError, RuntimeError) as error:
            print(f"Cannot start the chosen device: {error}", file=sys.stderr)
            return 1
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torch-xla", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    plugins = commands.add_parser("plugins", help="list installed plugins and the chosen device")
    plugins.add_argument(
        "--devices", action="store_true", help="also start the chosen device and list its devices"
    )
    plugins.set_defaults(run=_plugins)
    return parser


def main(argv: list[str] | None = None) -> int:
    import torch_xla  # noqa: F401 - registers installed plugins

    args = _parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
