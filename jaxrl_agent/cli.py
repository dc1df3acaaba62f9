"""The `jaxrl-agent` command: a small dispatcher over subcommands.

    jaxrl-agent serve --tiny-random --port 30000

Each subcommand lives in its own module, which supplies an
`add_..._arguments(parser)` function and a runner taking the parsed args.
"""

from __future__ import annotations

import argparse
from typing import Callable, Sequence


def _serve_command() -> tuple[Callable, Callable]:
    from jaxrl_agent.rollout import server

    return server.add_serve_arguments, server.serve


# name -> (help, loader returning (add_arguments, run)); a loader imports its
# module only when main() runs, so importing this module stays cheap.
COMMANDS: dict[str, tuple[str, Callable[[], tuple[Callable, Callable]]]] = {
    "serve": ("serve a model behind SGLang's HTTP API (embedded JAX engine)", _serve_command),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Parses `argv` (default sys.argv[1:]) and runs the chosen subcommand."""
    parser = argparse.ArgumentParser(prog="jaxrl-agent", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    runners = {}
    for name, (help_text, loader) in COMMANDS.items():
        add_arguments, run = loader()
        add_arguments(sub.add_parser(name, help=help_text))
        runners[name] = run
    args = parser.parse_args(argv)
    return int(runners[args.command](args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
