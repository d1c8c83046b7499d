"""export and rehearse: an inbox's recorded traffic as JSON lines, and that traffic
replayed against a handler on a scratch inbox (:mod:`agentbox.rehearsal`)."""


from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from agentbox.cli.app import JsonFlag, app, session
from agentbox.cli.run_cmd import NO_HANDLER, HandlerArgv, HandlerOption

if TYPE_CHECKING:
    from agentbox.cli.session import Session
    from agentbox.rehearsal import Recording, Report
    from agentbox.rehearsal.report import Pair

SinceFlag = Annotated[Optional[str], typer.Option(  # noqa: UP045 - Typer needs Optional
    "--since", metavar="T", help="Recording at or after T: a time (Unix seconds, ISO 8601) or "
    "a duration ago (7d).", show_default=False)]
UntilFlag = Annotated[Optional[str], typer.Option(  # noqa: UP045
    "--until", metavar="T", help="Recording before T.", show_default=False)]
PREVIEW = 70  # characters of a body the table shows; --json has it whole


def _recorded(sess: "Session", since: str | None, until: str | None) -> "Recording":
    """The live inbox's traffic in the window, read only."""
    from agentbox.cli.options import since_flag
    from agentbox.rehearsal.traffic import record

    now = sess.now()
    settings = sess.settings()
    return record(sess.store(), sess.user_or_none() or "", settings.timezone, settings.policy,
                  now, since_flag("--since", since, now, sess.zone),
                  since_flag("--until", until, now, sess.zone))


@app.command()
def export(
    ctx: typer.Context,
    since: SinceFlag = None,
    until: UntilFlag = None,
    output: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--output", "-o", metavar="FILE", help="Write to FILE (default: stdout).",
        show_default=False)] = None,
) -> None:
    """Write the inbox's recorded traffic as JSON lines, to keep as a rehearsal's fixture.

    A header line (format version, user, timezone, the settings in force),
    then in time order every event that arrived, every approval answer and
    every dispatch that went out, as far as retention still holds them. The
    format is in docs/rehearsal.md. Exit 0; 1 when FILE cannot be written.
    """
    import contextlib
    import os

    from agentbox import render
    from agentbox.errors import AgentboxError
    from agentbox.rehearsal.traffic import lines

    text = "".join(f"{line}\n" for line in lines(_recorded(session(ctx), since, until)))
    if output is None:
        render.data(text.rstrip("\n"))
        return
    temporary = f"{output}.{os.getpid()}.tmp"
    try:
        with open(temporary, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, output)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise AgentboxError(f"cannot write {output}: {exc.strerror or exc}") from None


def _loaded(path: str) -> "Recording":
    from agentbox.errors import BadInput
    from agentbox.rehearsal.traffic import read

    try:
        with open(path, "rb") as source:
            return read(source, path)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None


def _flat(body: str) -> str:
    flat = " ".join(body.split())
    return flat if len(flat) <= PREVIEW else flat[:PREVIEW - 1].rstrip() + "…"


def _row(pair: "Pair") -> list[Any]:
    from agentbox import render

    then, now = pair.recorded, pair.rehearsed
    side = then or now
    assert side is not None  # a pair has at least one side
    body = _flat(side.body)
    if then is not None and now is not None and then.body != now.body:
        body = f"{_flat(then.body)} → {_flat(now.body)}"
    return [pair.mark, render.when(then.at) if then else "-",
            render.when(now.at) if now else "-", side.channel, body]


def _totals(t: "dict[str, Any]") -> list[str]:
    return [f"runs: {t['runs']} ({t['done']} done, {t['failed']} failed, {t['killed']} killed, "
            f"{t['stalled']} stalled)",
            f"events: {t['events']} ({t['duplicates']} delivered twice, {t['refused']} "
            f"refused, {t['dead']} dead, {t['unfinished']} unfinished)",
            f"approvals: {t['approvals']} ({t['approved']} yes, {t['declined']} no, "
            f"{t['expired']} expired); timers fired: {t['timers_fired']}; sends: "
            f"{t['sends']}",
            f"steps: {t['steps']} ({t['steps_done']} done, {t['steps_uncertain']} uncertain; "
            f"{t['step_tries']} tries run); usage: {t['tokens']} tokens, cost {t['cost']:g}"]


def _show(report: "Report", origin: str) -> None:
    from agentbox import render

    traffic, totals = report.traffic, report.totals
    faults = f", faults {report.faults} (seed {report.seed})" if report.faults else ""
    render.line(f"rehearsed {len(traffic.arrivals)} arrival(s), {len(traffic.answers)} "
                f"answer(s) and {len(traffic.sends)} send(s) from {origin}{faults}")
    render.line()
    render.table(["", "sent", "would send", "channel", "body"],
                 [_row(p) for p in report.pairs], title="sends",
                 empty="nothing sent, then or now", text=["body"])
    render.line(f"{report.differences} difference(s) in what was sent "
                "(= same, ~ another time, ≠ another body, - not sent now, + new)")
    render.line()
    for text in _totals(totals):
        render.line(text)
    render.line()
    render.checklist(["promise", "held"],
                     [[p.name, render.Mark(p.held, "; ".join(p.broken))]
                      for p in report.promises])
    for repeat in report.repeats:
        runs = ", ".join(f"run {n} ({outcome})" for n, outcome in repeat.runs)
        render.line(f"repeated: {repeat.source}/{repeat.key} was handed to the handler in "
                    f"{runs}; an effect it had outside agentbox may have happened twice")
    for step in report.step_repeats:
        render.line(f"repeated: step {step.key!r} ran {step.tries} times ({step.status} now); "
                    "its work saw the same AGENTBOX_STEP_KEY each time")
    for run in report.failures:
        render.line(f"run {run.n} at {render.when(run.at)} {run.outcome}: {run.error}")


@app.command()
def rehearse(
    ctx: typer.Context,
    command: HandlerArgv = None,
    handler: HandlerOption = None,
    from_file: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--from", metavar="FILE", help="Recording an `agentbox export` wrote.",
        show_default=False)] = None,
    since: SinceFlag = None,
    until: UntilFlag = None,
    faults: Annotated[Optional[str], typer.Option(  # noqa: UP045
        "--faults", metavar="SPEC", help="Inject faults: kill=P,duplicate=P,stall=P, each "
        "a probability from 0 to 1.", show_default=False)] = None,
    seed: Annotated[int, typer.Option(
        "--seed", metavar="N", help="Which runs and arrivals the faults hit.")] = 0,
    fail_on_diff: Annotated[bool, typer.Option(
        "--fail-on-diff", help="Exit 1 when anything sent differs.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Replay recorded traffic against a handler on a scratch inbox and show what it
    would have sent beside what was sent.

    The traffic comes from an export (--from) or from this inbox (--since),
    which is only read. Events arrive at their recorded times on a simulated
    clock, under the settings in force here; the handler runs for real with
    AGENTBOX_NOW set to that clock. Exit 0 when every run finished and every
    promise held, 1 when a run failed, timed out or answered malformed, or a
    promise broke (or, with --fail-on-diff, anything sent differs), 2 for a
    usage error, 65 for an unreadable export.
    """
    from agentbox import render
    from agentbox.cli.dispatch_cmds import channel_plans
    from agentbox.cli.options import command_flag
    from agentbox.errors import UsageError
    from agentbox.rehearsal import rehearse as replay
    from agentbox.rules.faults import parse

    if (from_file is None) == (since is None):
        raise UsageError("give the traffic with --from FILE (an export) or --since T "
                         "(this inbox's own)")
    if from_file is not None and until is not None:
        raise UsageError("--until goes with --since; an export holds its own window")
    argv = command_flag("--handler", handler, command)
    spec = parse(faults) if faults is not None else None
    sess = session(ctx)
    settings = sess.settings({"handler": argv})
    if not settings.handler:
        raise UsageError(NO_HANDLER)
    traffic = _loaded(from_file) if from_file is not None else _recorded(sess, since, until)
    plans = channel_plans(sess, settings)
    sess.close()  # the live inbox is not needed again: nothing holds it open meanwhile
    report = replay(traffic, settings.policy, settings.handler,
                    sess.user_or_none() or traffic.header.user, spec, seed, channels=plans)
    code = report.exit_code(fail_on_diff)
    for key, exported, in_force in report.settings_differ:
        render.notice(f"{key} is {in_force} here; the export was made under {exported}")
    if as_json:
        render.document(report.document(fail_on_diff))
    else:
        _show(report, from_file or "this inbox")
    raise typer.Exit(code)
