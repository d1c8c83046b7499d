"""The ``agentbox`` command: parse arguments, call the store, render the result."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

import typer

from agentbox.cli.app import COMMANDS, app
from agentbox.errors import AgentboxError, Exit

if TYPE_CHECKING:
    from typer._click.core import Command
    from typer.core import TyperGroup

__all__ = ["app", "build", "load_commands", "main", "run"]

_ROOT_OPTIONS_WITH_VALUE = ("--user", "-u", "--db")


def load_commands(names: Sequence[str] | None = None) -> None:
    """Import the modules that define these commands (all of them by default)."""
    import importlib

    modules = {COMMANDS[n] for n in names} if names is not None else set(COMMANDS.values())
    for module in sorted(modules):
        importlib.import_module(f"agentbox.cli.{module}")


def _command_at(argv: Sequence[str]) -> int | None:
    """Where in ``argv`` the known command it runs is, or None (help, completion, an
    unknown word)."""
    import os

    if any(k.endswith("_COMPLETE") and k.startswith("_AGENTBOX") for k in os.environ):
        return None
    words = enumerate(argv)
    for n, word in words:
        if word in _ROOT_OPTIONS_WITH_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return n if word in COMMANDS else None
    return None


def _command_name(argv: Sequence[str]) -> str | None:
    """The known command ``argv`` runs, or None (help, completion, an unknown word)."""
    at = _command_at(argv)
    return None if at is None else argv[at]


def build(argv: Sequence[str]) -> TyperGroup:
    """The click group for this invocation, holding just the command it runs.

    Building a command inspects every parameter of every function; building
    only the one needed keeps start-up flat however many commands there are.
    """
    import copy

    from typer.main import get_command, get_command_name

    name = _command_name(argv)
    load_commands(None if name is None else [name])
    if name is None:
        group = get_command(app)
    else:
        only = copy.copy(app)
        only.registered_commands = [
            c for c in app.registered_commands
            if (c.name or get_command_name(c.callback.__name__ if c.callback else "")) == name]
        only.registered_groups = [g for g in app.registered_groups if g.name == name]
        group = get_command(only)
    assert isinstance(group, typer.core.TyperGroup)
    return group


def _takes_value(command: Command, word: str) -> bool | None:
    """Whether ``word`` is an option of ``command`` that takes a value; None if it is
    none of its options."""
    for param in command.params:
        if param.param_type_name == "option" and word in (*param.opts, *param.secondary_opts):
            return not (getattr(param, "is_flag", False) or getattr(param, "count", False))
    return None


def hoist_root_options(group: TyperGroup, argv: Sequence[str]) -> list[str]:
    """``argv`` with ``--user``/``-u``/``--db`` written after the command moved before it.

    ``agentbox status --user bob`` means what ``agentbox --user bob status`` does,
    where the command has no option of that name itself (``scenarios --db`` is
    its own). Nothing after ``--`` moves, nor anything after the first argument of a
    command that takes the rest of the line as its own (``dispatch CMD ARGS``), nor a
    word that is another option's value.
    """
    args = list(argv)
    at = _command_at(args)
    if at is None or args[at] not in group.commands:
        return args
    command: Command = group.commands[args[at]]
    n = at + 1
    kept: list[str] = []
    moved: list[str] = []
    while n < len(args):
        word = args[n]
        if word.startswith("--"):
            option, eq, _ = word.partition("=")
        else:  # -ubob is -u bob
            option, eq = ("-u", "=") if word.startswith("-u") and len(word) > 2 else (word, "")
        commands = getattr(command, "commands", None)
        if word == "--":
            break
        if commands is not None and word in commands:
            command = commands[word]
        elif not word.startswith("-") or word == "-":
            if not command.context_settings.get("allow_interspersed_args",
                                                command.allow_interspersed_args):
                break
        elif option in _ROOT_OPTIONS_WITH_VALUE and _takes_value(command, option) is None:
            if not eq and n + 1 == len(args):
                from agentbox.errors import UsageError

                raise UsageError(f"{option} needs a value")
            width = 1 if eq else 2
            moved += args[n:n + width]
            n += width
            continue
        elif not eq and _takes_value(command, option):
            kept.append(word)
            n += 1
            if n == len(args):
                break
            word = args[n]
        kept.append(word)
        n += 1
    return args[:at] + moved + args[at:at + 1] + kept + args[n:]



def _show_config_warnings() -> None:
    """A :class:`~agentbox.config.ConfigWarning` is one ``warning:`` line on stderr, each
    time the library raises it (it says each once); other warnings as Python shows them."""
    import warnings

    shown = warnings.showwarning
    if getattr(shown, "agentbox", False):  # run() again in the same process
        return

    def show(message: Warning | str, category: type[Warning], *args: object,
             **kwargs: object) -> None:
        if category.__name__ == "ConfigWarning":  # not imported here: ingest's start-up
            from agentbox import render

            render.warning(str(message))
            return
        shown(message, category, *args, **kwargs)  # type: ignore[arg-type]

    show.agentbox = True  # type: ignore[attr-defined]
    warnings.showwarning = show
    warnings.filterwarnings("always", message=".*unknown setting")


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; errors become one line on stderr."""
    from typer import Abort
    from typer._click.exceptions import ClickException, NoArgsIsHelpError

    from agentbox import render

    args = sys.argv[1:] if argv is None else argv
    _show_config_warnings()
    try:
        group = build(args)
        result = group.main(args=hoist_root_options(group, args), prog_name="agentbox",
                            standalone_mode=False)
    except NoArgsIsHelpError as exc:
        # A bare group: its help is the answer (rich has already printed it).
        if exc.format_message().strip():
            exc.show()
        return int(exc.exit_code)
    except ClickException as exc:
        context = getattr(exc, "ctx", None)
        where = context.command_path if context is not None else "agentbox"
        render.error(f"{exc.format_message()}  (try '{where} --help')")
        return int(exc.exit_code)
    except Abort:
        render.error("aborted")
        return int(Exit.FAILURE)
    except AgentboxError as exc:
        render.error(str(exc))
        return int(exc.exit_code)
    except UnicodeEncodeError as exc:
        # A command-line word that is not valid UTF-8 arrives as lone surrogates
        # and is refused wherever it is first encoded, however deep that is.
        if "surrogates" not in str(exc.reason):
            render.error(f"unexpected error: {type(exc).__name__}: {exc}")
            return int(Exit.FAILURE)
        render.error("an argument is not valid UTF-8")
        return int(Exit.DATA)
    except OverflowError:
        render.error("a number is out of range (the largest is 2**63 - 1)")
        return int(Exit.DATA)
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
    args = sys.argv[1:]
    code = run(args)
    if _command_name(args) in _ENDS_AT_ONCE:
        _end_now(code)
    sys.exit(code)


# Commands whose process has nothing left to do once they return: `ingest` runs
# once per webhook delivery and `step` once per step of a handler, and the
# interpreter's teardown (freeing every module and object one by one) is about a
# tenth of their life. By the time run() returns, their durable commits are made
# and their inbox closed (the root callback closes the session; `step` its own
# store), so only the output remains to be flushed.
_ENDS_AT_ONCE = frozenset({"ingest", "step"})


def _end_now(code: int) -> NoReturn:
    """End the process with ``code`` once stdout and stderr are flushed, skipping teardown."""
    import os

    try:
        sys.stdout.flush()
    except OSError:  # the reader went away: what run() answers to a broken pipe
        code = code or int(Exit.FAILURE)
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    os._exit(code)
