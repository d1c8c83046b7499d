"""scenarios: replay the article's failure cases (or a user's own file) through the store."""


from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app

if TYPE_CHECKING:
    from agentbox.scenario import Report


def _listing(as_json: bool) -> None:
    from agentbox import render
    from agentbox.scenario import load_all

    items = [{"name": s.name, "title": s.title, "steps": len(s.steps),
              "description": s.description} for s in load_all([])]
    render.records(items, ["name", "title", "steps"], as_json, title="scenarios",
                   empty="no scenario files found")


def _table(report: "Report") -> None:
    from agentbox import render
    from agentbox.scenario import offset, show

    rows: list[list[Any]] = []
    for result in report.results:
        step = result.step
        rows.append([f"{step.n}. [{offset(result.at, report.scenario.start)}] {step.label}",
                     show(step.expect), show(result.observed),
                     "·" if result.ok is None else result.ok])
    render.checklist(["step", "expected", "observed", "✓/✗"], rows,
                     title=f"{report.scenario.name}: {report.scenario.title}")


@app.command("scenarios")
def scenarios(
    names: Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045 - Typer needs Optional
        help="Shipped scenarios by number or name (4, 04, lease-takeover), or your own "
        ".toml files. Default: every shipped scenario.", show_default=False)] = None,
    list_only: Annotated[bool, typer.Option(
        "--list", help="Name the shipped scenarios and stop.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Replay failure scenarios on a throwaway inbox and compare every step with its figure.

    Each scenario runs on a fresh temporary database with a simulated clock;
    your own inbox and config are never touched. Exit 0 when every step
    matches, 1 when any differs, 65 for a malformed scenario file.
    """
    from agentbox import render
    from agentbox.errors import Exit
    from agentbox.scenario import load_all, run

    if list_only:
        _listing(as_json)
        return
    reports = [run(scenario) for scenario in load_all(names or [])]
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
        for report in reports:
            _table(report)
        rows: list[list[Any]] = [[r.scenario.name, r.checked, r.passed, r.failed]
                                 for r in reports]
        if len(reports) > 1:
            rows.append(["all", sum(r.checked for r in reports),
                         sum(r.passed for r in reports), failed])
        render.checklist(["scenario", "steps", "passed", "failed"], rows, title="summary")
    if failed:
        raise typer.Exit(int(Exit.FAILURE))
