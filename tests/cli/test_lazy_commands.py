"""Only the command being run is imported and built: start-up stays flat."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

from agentbox.cli import build, load_commands
from agentbox.cli.app import COMMANDS, app
from support.fixtures import Cli


def test_every_command_has_a_home_and_every_home_is_listed() -> None:
    load_commands()
    group = get_command(app)
    assert set(group.commands) == set(COMMANDS)


def test_help_lists_commands_in_the_documented_order() -> None:
    listed = [n for n in build(["--help"]).list_commands(None)]
    assert listed == list(COMMANDS)


def test_a_command_is_built_alone_after_root_options() -> None:
    group = build(["-u", "alice", "--db", "x.sqlite3", "dead", "list"])
    assert set(group.commands) == {"dead"}


def test_an_unknown_word_builds_everything_so_the_error_can_say_so(cli: Cli) -> None:
    assert set(build(["bogus"]).commands) == set(COMMANDS)
    result = cli("bogus")
    assert result.code == 2
    assert "No such command 'bogus'" in result.err


# What serve needs, and the PostgreSQL driver: a SQLite ingest loads none of it.
NOT_FOR_INGEST = ("agentbox.httpserver", "agentbox.serve", "agentbox.web", "agentbox.sources",
                  "h11", "http", "socket", "email",
                  "socketserver", "concurrent", "psycopg")


def ingest_loads() -> list[str]:
    """Every module one `agentbox ingest` imports, in a fresh process.

    The home fixture put AGENTBOX_HOME and AGENTBOX_USER in our environment.
    Coverage's own start-up in the child (which imports socket) is left out.
    """
    probe = (
        "import sys\n"
        "from agentbox.cli import run\n"
        "code = run(['ingest', 'github', 'd-1', '--payload', '{\"pr\": 1}'])\n"
        "print(code, ' '.join(sorted(sys.modules)), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COVERAGE_", "COV_CORE_"))}
    done = subprocess.run([sys.executable, "-c", probe],
                          capture_output=True, text=True, timeout=60, env=env)
    code, *loaded = done.stderr.split()
    assert code == "0", done.stderr
    return loaded


@pytest.mark.usefixtures("home")
@pytest.mark.sqlite_file  # an ingest into a file (PostgreSQL: tests/postgres)
def test_ingest_imports_neither_rich_nor_other_commands_nor_psycopg() -> None:
    assert [m for m in ingest_loads() if m.startswith(("agentbox.cli.", "rich"))
            or m.split(".")[0] in NOT_FOR_INGEST or m in NOT_FOR_INGEST] == [
        "agentbox.cli.app", "agentbox.cli.ingest_cmd", "agentbox.cli.session"]


@pytest.mark.sqlite_file  # an ingest into a file
def test_ingest_loads_no_time_zones_or_cron_even_with_a_zone_configured(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "config.toml").write_text('timezone = "Europe/Berlin"\n')
    heavy = ("zoneinfo", "cronsim", "croniter", "dateutil", "agentbox.calendar")
    assert [m for m in ingest_loads() if m.startswith(heavy)] == []


@pytest.mark.usefixtures("home")
@pytest.mark.sqlite_file  # an ingest into a file
def test_a_single_ingest_loads_neither_the_bulk_path_nor_orjson() -> None:
    assert [m for m in ingest_loads() if m.split(".")[0] == "orjson"
            or m == "agentbox.jsonl"] == []
