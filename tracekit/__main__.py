"""`python -m tracekit` and the `tracekit` command: the CLI, with Ctrl-C while it starts (its modules
loading, typer building the commands) an exit 130 like at any other moment, not a traceback."""

from __future__ import annotations

import signal
import sys

EXIT_INTERRUPTED = 130


def main() -> None:
    try:
        from tracekit.cli import main as cli

        cli()
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    finally:
        # The command is over and its exit code decided: a late Ctrl-C (or a library echoing the
        # one it handled) must not kill the interpreter while it shuts down.
        signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    main()
