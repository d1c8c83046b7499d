"""Run every benchmark and print one table: what, subject, baseline, ratio, target, ok?

    python bench/run.py [--quick] [--only NAME…] [--dir DIR] [--strict]
    python bench/run.py --markdown [--update-readme]

Each benchmark is a script of its own, run here in a fresh process of this
same interpreter. Where the bench-peers extra is installed, the scripts of
bench/peers/ set agentbox beside the job queues it would be compared with,
in a second table (never a target: ``--strict`` ignores it); without the
extra they are skipped, and one line says so. The figures of the latest run
are kept in bench/results/latest.json, with the date and a description of
the machine; ``--markdown`` prints them as markdown tables (running
nothing), and ``--update-readme`` writes those into bench/README.md and
docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from peers.peerlib import INSTALL, missing, ratio_text, verdict

from benchlib import BENCH, TIMES, Row, filesystem, format_value

SCRIPTS = ("startup", "bulk_ingest", "engine_ingest", "run_cycle", "scale", "timers",
           "concurrency", "serve", "console", "wakeup", "watch", "prune_ingest", "year",
           "pg_ingest", "pg_run_cycle", "pg_scale", "pg_pool", "rehearse", "steps",
           "governed_run", "channels")
PEER_SCRIPTS = tuple(f"peers/{name}" for name in ("enqueue", "redelivery", "latency", "drain",
                                                   "cli"))
LATEST = BENCH / "results" / "latest.json"
# The pages that show the latest full run's tables, between each table's marks.
PAGES = (BENCH / "README.md", BENCH.parent / "docs" / "performance.md")
MARKS = {"results": ("<!-- results:start -->", "<!-- results:end -->"),
         "peers": ("<!-- peers:start -->", "<!-- peers:end -->")}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(bench_dir: Path) -> str:
    return (f"{platform.system()} {platform.release()} {platform.machine()}, {cpu_model()}, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}, databases on "
            f"{filesystem(bench_dir)}")


def run_script(name: str, args: argparse.Namespace) -> tuple[list[Row], str | None]:
    """Run one benchmark script; its rows, or the reason it failed."""
    argv = [sys.executable, str(BENCH / f"{name}.py"), "--json"]
    if args.quick:
        argv.append("--quick")
    if args.dir:
        argv += ["--dir", args.dir]
    if args.pg:
        argv += ["--pg", args.pg]
    print(f"{name}:", file=sys.stderr, flush=True)
    done = subprocess.run(argv, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        return [], f"exited {done.returncode}"
    try:
        found = json.loads(done.stdout)
        if found.get("skipped"):
            print(f"  skipped: {found['skipped']}", file=sys.stderr, flush=True)
        return [Row.from_document(d) for d in found["rows"]], None
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return [], f"unreadable output ({exc})"


HEAD = ("what", "subject", "baseline", "ratio", "target", "ok?")
PEER_HEAD = ("what", "agentbox", "peer", "ratio", "ahead")


def cells(r: Row, missed: str = "MISSED") -> tuple[str, ...]:
    """A row of the main table, its cells as text."""
    return (r.what, format_value(r.subject, r.unit), format_value(r.baseline, r.unit),
            f"{r.ratio:.2f}{TIMES}", r.target_text, ("ok" if r.ok else missed) + errors(r))


def peer_cells(r: Row) -> tuple[str, ...]:
    """A row of the peer table: agentbox, the peer, agentbox ÷ peer, the side ahead."""
    return (r.what, format_value(r.subject, r.unit), format_value(r.baseline, r.unit),
            ratio_text(r), verdict(r) + errors(r))


def errors(r: Row) -> str:
    return f" ({r.errors} errors)" if r.errors else ""


def grid(head: tuple[str, ...], body: list[tuple[str, ...]], failed: dict[str, str]) -> str:
    """Columns padded to their widest cell, a script that failed as a line of its own."""
    body = body + [(f"{name}: FAILED, {why}", *["-"] * (len(head) - 2), "FAILED")
                   for name, why in failed.items()]
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]

    def fmt(line: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(line, widths, strict=True)))
    return "\n".join([fmt(head), "  ".join("-" * w for w in widths), *map(fmt, body)])


def markdown_table(head: tuple[str, ...], body: list[tuple[str, ...]],
                   failed: dict[str, str]) -> list[str]:
    def line(row: tuple[str, ...]) -> str:
        return f"| {' | '.join(row)} |"
    return [line(head), line(("---", *["---:"] * (len(head) - 2), ":---:")), *map(line, body),
            *(f"| {name} | failed: {why} |{' |' * (len(head) - 2)}"
              for name, why in failed.items())]


def markdown(saved: dict[str, Any]) -> dict[str, str]:
    """The latest run as markdown, by the name of the marks each table goes between: the
    main table and the peer table, each only where the run made it."""
    mode = "Quick run (small N: the figures mean little)" if saved["quick"] else "Full run"
    heading = [f"{mode} of {saved['date']}, {saved['seconds']:.0f} s.  ",
               f"Machine: {saved['machine']}.", ""]
    texts: dict[str, str] = {}
    if saved["rows"] or saved["failed"]:
        body = [cells(Row.from_document(d), "missed") for d in saved["rows"]]
        texts["results"] = "\n".join(heading + markdown_table(HEAD, body, saved["failed"]))
    if saved.get("peers") or saved.get("peers_failed"):
        body = [peer_cells(Row.from_document(d)) for d in saved["peers"]]
        texts["peers"] = "\n".join(heading + markdown_table(PEER_HEAD, body,
                                                             saved["peers_failed"]))
    return texts


def update_pages(texts: dict[str, str]) -> None:
    """Write each table between its marks on every page; a table the run did not make
    leaves its block as it was."""
    for page in PAGES:
        content = page.read_text(encoding="utf-8")
        for mark, text in texts.items():
            start, end = MARKS[mark]
            if start not in content or end not in content:
                raise SystemExit(f"{page.name} has no {start} … {end} block to fill")
            before, rest = content.split(start, 1)
            _, after = rest.split(end, 1)
            content = f"{before}{start}\n{text}\n{end}{after}"
        page.write_text(content, encoding="utf-8")


def run_all(names: list[str], args: argparse.Namespace) -> tuple[list[Row], dict[str, str]]:
    rows: list[Row] = []
    failed: dict[str, str] = {}
    for name in names:
        found, why = run_script(name, args)
        rows += found
        if why is not None:
            failed[name] = why
    return rows, failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small N everywhere: checks the scripts work (under a minute)")
    parser.add_argument("--only", nargs="+", choices=(*SCRIPTS, *PEER_SCRIPTS, "peers"),
                        metavar="NAME", help=f"run only these: {', '.join(SCRIPTS)}; "
                        f"{', '.join(PEER_SCRIPTS)}, or peers for all of those")
    parser.add_argument("--dir", default=os.environ.get("AGENTBOX_BENCH_DIR"),
                        help="where the databases go (default: the system temp folder)")
    parser.add_argument("--pg", default=os.environ.get("AGENTBOX_BENCH_PG"),
                        help="the PostgreSQL server of the pg_* scripts (default: "
                        "postgresql://postgres@127.0.0.1:5432/test); without one they are "
                        "skipped, or fail under AGENTBOX_REQUIRE_PG=1")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a target is missed, not only when a script fails")
    parser.add_argument("--markdown", action="store_true",
                        help="print the latest run as a markdown table; runs nothing")
    parser.add_argument("--update-readme", action="store_true",
                        help="with --markdown: write the table into bench/README.md and "
                        "docs/performance.md")
    args = parser.parse_args()

    if args.markdown:
        if not LATEST.exists():
            raise SystemExit("no run recorded yet: run `python bench/run.py` first")
        saved = json.loads(LATEST.read_text(encoding="utf-8"))
        texts = markdown(saved)
        if args.update_readme:
            update_pages(texts)
        print("\n\n".join(texts.values()))
        if "peers" not in texts and saved.get("peers_skipped"):
            print(f"\npeer table skipped: {saved['peers_skipped']}")
        return 0

    started = time.monotonic()
    chosen = args.only or [*SCRIPTS, "peers"]
    names = [n for n in chosen if n in SCRIPTS]
    peer_names = [n for n in PEER_SCRIPTS if n in chosen or "peers" in chosen]
    rows, failed = run_all(names, args)
    absent = missing() if peer_names else []
    skipped = ("not chosen by --only" if not peer_names else
               f"the bench-peers extra is not installed ({', '.join(absent)}): {INSTALL}"
               if absent else None)
    peers, peers_failed = run_all([] if skipped else peer_names, args)
    seconds = time.monotonic() - started
    if names:
        print(grid(HEAD, [cells(r) for r in rows], failed))
    if skipped:
        print(f"\npeer table skipped: {skipped}")
    elif peer_names:
        print(f"\nagentbox beside its peers (ratio: agentbox ÷ peer)\n"
              f"{grid(PEER_HEAD, [peer_cells(r) for r in peers], peers_failed)}")
    print(f"\n{len(rows) + len(peers)} figures in {seconds:.0f} s"
          + (" (quick: small N, the figures mean little)" if args.quick else ""))
    LATEST.parent.mkdir(exist_ok=True)
    LATEST.write_text(json.dumps({
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(Path(args.dir or tempfile.gettempdir())),
        "quick": args.quick, "seconds": seconds, "failed": failed,
        "rows": [r.document() for r in rows], "peers_skipped": skipped,
        "peers_failed": peers_failed, "peers": [r.document() for r in peers]},
        indent=2) + "\n", encoding="utf-8")
    if failed or peers_failed:
        return 1
    return 1 if args.strict and not all(r.ok for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
