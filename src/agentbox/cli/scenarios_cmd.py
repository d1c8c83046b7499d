"""scenarios: replay the article's failure cases (or a user's own file) through the store."""


from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session

if TYPE_CHECKING:
    from agentbox.replay import Scenario, ScenarioReport

ARTICLE = ("Anthropic's always-on agents guide: what the inbox, timers and outbox do "
           "when a worker dies, tested in SQLite")
AUTHOR = "Max Nardit"
ARTICLE_CASES = 8  # the first eight shipped scenarios are the article's cases, in its order


def _from_the_article(scenarios: "list[Scenario]") -> None:
    """Name the article once, above the output, when a shipped scenario is in it."""
    from agentbox import render
    from agentbox.replay import shipped

    names = {name for name, _ in shipped()}
    if any(s.name in names and s.origin == f"{s.name}.toml" for s in scenarios):
        render.prose(f'Scenarios 01-{ARTICLE_CASES:02d} replay the failure cases of "{ARTICLE}",'
                     f" by {AUTHOR}; the others show what agentbox adds.")
        render.line()


def _listing(as_json: bool) -> None:
    from agentbox import render
    from agentbox.replay import load_all

    scenarios = load_all([])
    items = [{"name": s.name, "title": s.title, "steps": len(s.steps), "story": s.story,
              "description": s.description} for s in scenarios]
    if not as_json:
        _from_the_article(scenarios)
    render.records(items, ["name", "steps", "title"], as_json, title="scenarios",
                   empty="no scenario files found", text=["title"])


def _table(report: "ScenarioReport") -> None:
    """The scenario's title and story, then one row per step.

    The clock column shows where the simulated clock stands whenever a step
    has moved it. A step that observed what it expected shows ✓; any other
    shows ✗ and what it observed instead (``--json`` carries both always).
    """
    from agentbox import render
    from agentbox.replay import offset, show

    scenario = report.scenario
    render.prose(f"{scenario.name}: {scenario.title}", bold=True)
    if scenario.story:
        render.prose(scenario.story, indent=2)
        render.line()
    rows: list[list[Any]] = []
    clock = None
    for result in report.results:
        step = result.step
        now = offset(result.at, scenario.start)
        verdict = (None if result.ok is None
                   else render.Mark(result.ok, "" if result.ok else show(result.observed)))
        rows.append([f"{step.n}. {step.label}", "" if now == clock else now,
                     show(step.expect), verdict or ""])
        clock = now
    render.checklist(["step", "clock", "expected", "observed"], rows)
    render.line()


def _database(flag: Optional[str], root_flag: Optional[str]) -> Optional[str]:  # noqa: UP045
    """The PostgreSQL URL to replay on, or None for SQLite.

    Only a flag selects it, never $AGENTBOX_DB or the setting: a replay makes
    and drops a schema, which nobody should get without asking.
    """
    from agentbox.errors import UsageError
    from agentbox.location import is_url

    if flag is not None and not is_url(flag):
        raise UsageError("scenarios --db takes a postgresql:// URL; without it they replay "
                         "on a temporary SQLite file")
    chosen = flag or root_flag
    return chosen if chosen is not None and is_url(chosen) else None


@app.command("scenarios")
def scenarios(
    ctx: typer.Context,
    names: Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045 - Typer needs Optional
        help="Shipped scenarios by number or name (4, 04, lease-takeover), or your own "
        ".toml files. Default: every shipped scenario.", show_default=False)] = None,
    list_only: Annotated[bool, typer.Option(
        "--list", help="Name the shipped scenarios and stop.")] = False,
    database: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--db", metavar="URL",
        help="Replay on PostgreSQL: a temporary schema in this postgresql:// database, "
        "dropped afterwards (the global --db URL works too). Default: a temporary SQLite "
        "file.", show_default=False)] = None,
    as_json: JsonFlag = False,
) -> None:
    """Replay failure scenarios on a throwaway inbox and compare every step with its figure.

    Each scenario runs on a fresh temporary database with a simulated clock;
    your own inbox and config are never touched. Exit 0 when every step
    matches, 1 when any differs, 65 for a malformed scenario file.
    """
    from agentbox import render
    from agentbox.errors import Exit
    from agentbox.replay import load_all, run

    if list_only:
        _listing(as_json)
        return
    target = _database(database, session(ctx).db_flag)
    loaded = load_all(names or [])
    reports = [run(scenario, target) for scenario in loaded]
    failed = sum(r.failed for r in reports)
    if as_json:
        render.document({
            "ok": failed == 0,
            "checked": sum(r.checked for r in reports),
            "passed": sum(r.passed for r in reports),
            "failed": failed,
            "scenarios": [r.document() for r in reports],
        })
    else:
        _from_the_article(loaded)
        for report in reports:
            _table(report)
        rows: list[list[Any]] = [
            [r.scenario.name, len(r.results), r.checked, r.passed, r.failed] for r in reports]
        if len(reports) > 1:
            rows.append(["all", sum(len(r.results) for r in reports),
                         sum(r.checked for r in reports), sum(r.passed for r in reports),
                         failed])
        render.prose("summary", bold=True)
        render.checklist(["scenario", "steps", "checked", "passed", "failed"], rows)
    if failed:
        raise typer.Exit(int(Exit.FAILURE))
