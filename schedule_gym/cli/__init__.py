"""The ``schedule-gym`` command line: ``space``, ``tasks``, ``table``, ``tune``, ``compare``, ``calibrate``,
``benchmark`` and ``tune-model``.

One module per command, each with ``add_parser(sub)`` and ``run(args) -> exit code``; :func:`main` assembles
them. Bad input (an unknown name, a malformed value), an unusable record file, an unreachable or silent RPC
tracker, a task that cannot be tuned: one line on stderr, ``schedule-gym: error: ...``, naming the value,
exit code 2 (:mod:`schedule_gym.cli.errors`; the library's contract: :mod:`schedule_gym.errors`).
``tune`` exits with 130 when stopped with Ctrl-C (the result so far is printed, the records stay intact); a
Ctrl-C anywhere else (while a command imports its libraries, say) prints one line and exits with 130 too.
"""

from __future__ import annotations

import sys

from schedule_gym.cli import benchmark, calibrate, compare, space, table, tasks, tune, tune_model
from schedule_gym.cli.errors import EXIT_INTERRUPTED, EXIT_USAGE, CLIError, Parser, user_error_line
from schedule_gym.cli.params import parse_params
from schedule_gym.errors import USER_ERRORS

__all__ = ["CLIError", "main", "parse_params"]

#: The commands, in the order ``schedule-gym --help`` lists them.
COMMANDS = (space, tasks, table, tune, compare, calibrate, benchmark, tune_model)


def main(argv: list[str] | None = None) -> int:
    """Run the command line on ``argv`` (default: ``sys.argv[1:]``); returns the exit code."""
    parser = Parser(prog="schedule-gym", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    args = None
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except (CLIError, *USER_ERRORS) as exc:
        print(user_error_line(exc), file=sys.stderr)
        return EXIT_USAGE
    except (TypeError, ValueError) as exc:
        if getattr(args, "command", None) == "tune":
            raise  # tune turns bad input into CLIError while setting up; anything later is a bug
        print(f"schedule-gym: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # the commands handle it where they have something to say (a run stopped)
        print("schedule-gym: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
