"""The ``agentbox`` command: parse arguments, call the engine, render the result."""

from __future__ import annotations

import sqlite3
import sys

from agentbox.cli import (  # noqa: F401  (each module registers its commands on app)
    approve_cmds,
    config_cmd,
    dispatch_cmds,
    inbox_cmds,
    run_cmd,
    scenarios_cmd,
    schedule_cmds,
    systemd_cmd,
)
from agentbox.cli.app import app
from agentbox.errors import AgentboxError, Exit

__all__ = ["app", "main", "run"]


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; errors become one line on stderr."""
    from typer import Abort
    from typer._click.exceptions import ClickException, NoArgsIsHelpError
    from typer.main import get_command

    from agentbox import render
    from agentbox.engine.db import translate

    command = get_command(app)
    try:
        result = command.main(args=argv, prog_name="agentbox", standalone_mode=False)
    except NoArgsIsHelpError as exc:
        # A bare group: its help is the answer (rich has already printed it).
        if exc.format_message().strip():
            exc.show()
        return int(exc.exit_code)
    except ClickException as exc:
        render.error(exc.format_message() + "  (try 'agentbox --help')")
        return int(exc.exit_code)
    except Abort:
        render.error("aborted")
        return int(Exit.FAILURE)
    except AgentboxError as exc:
        render.error(str(exc))
        return int(exc.exit_code)
    except sqlite3.Error as exc:
        translated = translate(exc)
        render.error(str(translated))
        return int(getattr(translated, "exit_code", Exit.FAILURE))
    except BrokenPipeError:
        return int(Exit.FAILURE)
    except KeyboardInterrupt:
        render.error("interrupted")
        return 130
    except Exception as exc:  # the last line of defence: still no traceback
        render.error(f"unexpected error: {type(exc).__name__}: {exc}")
        return int(Exit.FAILURE)
    return result if isinstance(result, int) else 0


def main() -> None:
    sys.exit(run())
