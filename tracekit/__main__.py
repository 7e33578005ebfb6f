"""`python -m tracekit` and the `tracekit` command: the CLI, with Ctrl-C while it starts (its modules
loading, typer building the commands) `interrupted` and exit 130 like at any other moment, not a
traceback. tracekit/__init__.py guards the first lines; from `main` on, tracekit.cli handles it."""

import signal
import sys

EXIT_INTERRUPTED = 130


def main() -> None:
    try:
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:  # ignored in background jobs: stays so
            signal.signal(signal.SIGINT, signal.default_int_handler)
        from tracekit.cli import main as cli

        cli()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(EXIT_INTERRUPTED)
    finally:
        # The command is over and its exit code decided: a late Ctrl-C (or a library echoing the
        # one it handled) must not kill the interpreter while it shuts down. signal.signal first runs
        # the handler of a SIGINT still pending (one that reached another thread): that one too.
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        except KeyboardInterrupt:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


if __name__ == "__main__":
    main()
