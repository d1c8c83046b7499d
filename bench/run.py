"""Run every benchmark and print one table: what, subject, baseline, ratio, target, ok?

    python bench/run.py [--quick] [--only NAME…] [--dir DIR] [--strict]
    python bench/run.py --markdown [--update-readme]

Each benchmark is a script of its own, run here in a fresh process of this
same interpreter. The figures of the latest run are kept in
bench/results/latest.json, with the date and a description of the machine;
``--markdown`` prints them as a markdown table (running nothing), and
``--update-readme`` writes that table into bench/README.md and
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

from benchlib import BENCH, TIMES, Row, filesystem, format_value

SCRIPTS = ("startup", "bulk_ingest", "engine_ingest", "run_cycle", "scale", "timers",
           "concurrency", "serve", "wakeup", "watch", "prune_ingest", "year", "pg_ingest",
           "pg_run_cycle", "pg_scale", "pg_pool")
LATEST = BENCH / "results" / "latest.json"
# The pages that show the latest full run's table, between the START and END marks.
PAGES = (BENCH / "README.md", BENCH.parent / "docs" / "performance.md")
START, END = "<!-- results:start -->", "<!-- results:end -->"


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


def table(rows: list[Row], failed: dict[str, str]) -> str:
    head = ("what", "subject", "baseline", "ratio", "target", "ok?")
    body = [(r.what, format_value(r.subject, r.unit), format_value(r.baseline, r.unit),
             f"{r.ratio:.2f}{TIMES}", r.target_text,
             ("ok" if r.ok else "MISSED") + (f" ({r.errors} errors)" if r.errors else ""))
            for r in rows]
    body += [(f"{name}: FAILED, {why}", "-", "-", "-", "-", "FAILED")
             for name, why in failed.items()]
    widths = [max(len(line[i]) for line in (head, *body)) for i in range(len(head))]

    def fmt(line: tuple[str, ...]) -> str:
        return "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                         for i, (cell, w) in enumerate(zip(line, widths, strict=True)))
    return "\n".join([fmt(head), "  ".join("-" * w for w in widths), *map(fmt, body)])


def markdown(saved: dict[str, object]) -> str:
    rows = [Row.from_document(d) for d in saved["rows"]]  # type: ignore[attr-defined]
    mode = "Quick run (small N: the figures mean little)" if saved["quick"] else "Full run"
    lines = [f"{mode} of {saved['date']}, {saved['seconds']:.0f} s.  ",
             f"Machine: {saved['machine']}.", "",
             "| what | subject | baseline | ratio | target | ok? |",
             "| --- | ---: | ---: | ---: | ---: | :---: |"]
    lines += [f"| {r.what} | {format_value(r.subject, r.unit)} | "
              f"{format_value(r.baseline, r.unit)} | {r.ratio:.2f}{TIMES} | {r.target_text} | "
              f"{'ok' if r.ok else 'missed'}{f' ({r.errors} errors)' if r.errors else ''} |"
              for r in rows]
    lines += [f"| {name} | failed: {why} | | | | |"
              for name, why in saved["failed"].items()]  # type: ignore[attr-defined]
    return "\n".join(lines)


def update_pages(text: str) -> None:
    for page in PAGES:
        content = page.read_text(encoding="utf-8")
        if START not in content or END not in content:
            raise SystemExit(f"{page.name} has no {START} … {END} block to fill")
        before, rest = content.split(START, 1)
        _, after = rest.split(END, 1)
        page.write_text(f"{before}{START}\n{text}\n{END}{after}", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small N everywhere: checks the scripts work (under a minute)")
    parser.add_argument("--only", nargs="+", choices=SCRIPTS, metavar="NAME",
                        help=f"run only these: {', '.join(SCRIPTS)}")
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
        text = markdown(json.loads(LATEST.read_text(encoding="utf-8")))
        if args.update_readme:
            update_pages(text)
        print(text)
        return 0

    started = time.monotonic()
    rows: list[Row] = []
    failed: dict[str, str] = {}
    for name in args.only or SCRIPTS:
        found, why = run_script(name, args)
        rows += found
        if why is not None:
            failed[name] = why
    seconds = time.monotonic() - started
    print(table(rows, failed))
    print(f"\n{len(rows)} figures in {seconds:.0f} s"
          + (" (quick: small N, the figures mean little)" if args.quick else ""))
    LATEST.parent.mkdir(exist_ok=True)
    LATEST.write_text(json.dumps({
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(Path(args.dir or tempfile.gettempdir())),
        "quick": args.quick, "seconds": seconds, "failed": failed,
        "rows": [r.document() for r in rows]}, indent=2) + "\n", encoding="utf-8")
    if failed:
        return 1
    return 1 if args.strict and not all(r.ok for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
