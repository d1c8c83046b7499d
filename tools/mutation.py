#!/usr/bin/env python3
"""Mutation testing of agentbox's rules and backends, scored per module.

    python tools/mutation.py rules               # src/agentbox/rules/*.py
    python tools/mutation.py ledger              # every transaction, once for both engines
    python tools/mutation.py sqlite postgres     # the engines
    python tools/mutation.py rules.timers        # one module
    python tools/mutation.py --report rules      # score the last run again, running nothing
    python tools/mutation.py --survivors sqlite  # again: what is left alive or unchecked

mutmut (``pip install -e '.[mutation]'``) copies src/ into ./mutants, changes
one thing at a time in the chosen modules and runs the in-process tests that
reach the changed function (``[tool.mutmut]`` in pyproject.toml). A mutant
the tests still pass with has *survived*: a rule nothing pins. A survivor that
cannot change what any caller sees is *equivalent*; each is listed, with the
reason, in tools/mutation-equivalents.toml and subtracted here. The score is
the share of the other mutants the tests killed (a timeout counts: the run
did not pass). See docs/mutation.md.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENTS = ROOT / "tools" / "mutation-equivalents.toml"
GROUPS = {"rules": "agentbox.rules", "ledger": "agentbox.ledger",
          "sqlite": "agentbox.backends.sqlite", "postgres": "agentbox.backends.postgres"}
# mutmut's exit codes (mutmut/stats.py) folded into the columns printed here
SET_ASIDE = 34  # mutmut's "skipped": a mutant of a recognised equivalent kind, not run
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
          SET_ASIDE: "equivalent",
          36: "timeout", -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout"}
COLUMNS = ("killed", "timeout", "survived", "no tests", "equivalent", "other")
UNKILLED = ("survived", "no tests")


@dataclass(frozen=True)
class Mutant:
    name: str      # mutmut's, e.g. agentbox.rules.timers.x_owed__mutmut_5 (numbers move)
    module: str    # agentbox.rules.timers
    function: str  # owed, or Every.span for a method
    status: str


@dataclass(frozen=True)
class Change:
    """A mutant as a stable description: the lines it takes out and puts in."""

    before: str
    after: str
    context: str = ""  # the original lines around them, up to the first one taken out


def parse_name(name: str, status: str) -> Mutant:
    module, _, generated = name.rpartition(".")
    function = generated.rpartition("__mutmut_")[0]
    # x_name for a function, xǁClassǁname for a method
    function = function[2:].replace("ǁ", ".") if function.startswith(("x_", "xǁ")) else function
    return Mutant(name, module, function, status)


def targets(args: list[str]) -> list[str]:
    """Module prefixes to mutate: a group (rules, sqlite, postgres) or a module below one."""
    chosen = []
    for arg in args:
        head, _, rest = arg.partition(".")
        if head not in GROUPS:
            sys.exit(f"unknown target {arg!r}: one of {', '.join(GROUPS)}, optionally "
                     "followed by .module (rules.timers)")
        chosen.append(GROUPS[head] + (f".{rest}" if rest else ""))
    return chosen


def source_file(module: str) -> Path:
    return Path("src", *module.split(".")).with_suffix(".py")


VACUUM_EVERY_S = 30


def vacuum_catalogs(stop: threading.Event) -> None:
    """Keep the test server's catalogs small while mutmut runs: a plain VACUUM every
    half minute (tests/support/postgres.py says why). Without psycopg, a server or the
    right to vacuum them, this does nothing."""
    try:
        import psycopg
    except ImportError:
        return
    sys.path.insert(0, str(ROOT / "tests"))
    from support.postgres import vacuum_catalogs as vacuum

    while not stop.wait(VACUUM_EVERY_S):
        with contextlib.suppress(psycopg.Error):
            vacuum()


def generate(jobs: int) -> None:
    """Write mutants/ as ``mutmut run`` starts by doing, without testing anything, so
    that the mutants of a recognised kind can be set aside first (set_aside)."""
    from mutmut.__main__ import create_mutants
    from mutmut.mutation.trampoline import set_mutant_under_test
    from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths

    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        # mutmut names every file it copies; its forked workers inherit the redirect
        with contextlib.redirect_stdout(io.StringIO()):
            set_mutant_under_test("mutant_generation")
            copy_src_dir()
            copy_also_copy_files()
            setup_source_paths()
            create_mutants(jobs)
    finally:
        os.chdir(cwd)


def within(mutant: Mutant, prefixes: list[str]) -> bool:
    return any(mutant.module == p or mutant.module.startswith(p + ".") for p in prefixes)


def metas() -> list[Path]:
    return sorted((ROOT / "mutants" / "src").rglob("*.py.meta"))


def set_aside(chosen: Callable[[Mutant, int | None], bool], prefixes: list[str]) -> None:
    """Leave mutmut, which runs every mutant with no result, only the ones ``chosen``
    (by their current exit code) to run.

    An unchecked mutant of the modules asked for that is of a kind the report
    counts as equivalent whatever the tests say (the case of SQL keywords) is set
    aside for good, as mutmut's *skipped*: run, it would survive, and a survivor
    runs every test that reaches its function, in the connection code every test
    goes through a minute or more, for nothing the score counts. mutmut keeps a
    result until the function changes. Unchecked mutants of other modules are set
    aside for this run only (mutmut given names instead would run them again
    whatever their result, so names are not given); their names go to FOR_NOW."""
    kinds = [e for e in equivalents() if e.kind]
    for_now: list[str] = []
    for meta in metas():
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        for name, code in codes.items():
            mutant = parse_name(name, "")
            if code in (None, SET_ASIDE) and within(mutant, prefixes) and any(
                    e.matches(mutant, change(mutant)) for e in kinds):
                codes[name] = SET_ASIDE
            elif chosen(mutant, code):
                codes[name] = None
            elif code is None:
                codes[name] = SET_ASIDE
                for_now.append(name)
        meta.write_text(json.dumps(data, indent=4))
    FOR_NOW.write_text(json.dumps(for_now))


# The names set_aside marked for one run alone, until restore gives them back: kept in
# a file, so that a run stopped by a signal (no ``finally`` runs then) is mended by the
# next invocation before anything reads a result.
FOR_NOW = ROOT / "mutants" / "set-aside-for-now.json"


def restore() -> None:
    """Give the mutants set aside for one run back their unchecked state."""
    if not FOR_NOW.exists():
        return
    names = set(json.loads(FOR_NOW.read_text()))
    for meta in metas():
        data = json.loads(meta.read_text())
        codes = data["exit_code_by_key"]
        touched = [n for n, code in codes.items() if n in names and code == SET_ASIDE]
        for name in touched:
            codes[name] = None
        if touched:
            meta.write_text(json.dumps(data, indent=4))
    FOR_NOW.unlink()


def run_mutmut(chosen: Callable[[Mutant, int | None], bool], prefixes: list[str], jobs: int,
               keep: bool) -> None:
    if not keep:
        shutil.rmtree(ROOT / "mutants", ignore_errors=True)
    (ROOT / "mutants").mkdir(exist_ok=True)
    generate(jobs)
    set_aside(chosen, prefixes)
    log = ROOT / "mutants" / "mutmut.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    print(f"mutmut over {', '.join(prefixes)} with {jobs} worker(s); its output: {log}",
          flush=True)
    stop = threading.Event()
    vacuum = threading.Thread(target=vacuum_catalogs, args=(stop,), daemon=True)
    vacuum.start()
    try:
        with log.open("w") as out:
            done = subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children",
                                   str(jobs)],
                                  cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    finally:
        stop.set()
        restore()
    if done.returncode != 0:
        sys.exit(f"mutmut failed (exit {done.returncode}); see {log}")


# -- code run as its module loads ------------------------------------------------
#
# mutmut tests each mutant in a process forked from one that has imported the code
# already, so a mutant of a function only called while its module loads (the schema's
# generated statements, say) is never active: it would survive whatever the tests.
# Each such survivor is tested again in a fresh process that imports the code with the
# mutant active, over the in-process suites that reach the schema.

LOADING = ROOT / "mutants" / "import-time.json"
LOADING_SUITES = ("tests/contract", "tests/engine")
LOADING_TIMEOUT_S = 900


def loading_tests() -> list[str]:
    """mutmut's own selection (pyproject.toml), narrowed to the suites that reach the
    schema, with its exclusions."""
    chosen = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"][
        "pytest_add_cli_args_test_selection"]
    return [a for a in chosen if a.startswith("-") or a.startswith(LOADING_SUITES)]


def fresh_pytest(mutant: str | None) -> int | None:
    """The exit code of the loading suites in a fresh process with ``mutant`` active
    (None: the code as it is); None after the timeout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MUTANT_UNDER_TEST")}
    env["PYTHONPATH"] = str(ROOT / "mutants" / "src")  # before the installed copy
    if mutant is not None:
        env["MUTANT_UNDER_TEST"] = mutant
    try:
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:randomly",
             "-p", "no:cacheprovider", *loading_tests()],
            cwd=ROOT / "mutants", env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, timeout=LOADING_TIMEOUT_S).returncode
    except subprocess.TimeoutExpired:
        return None


def called_as_loading(module: str) -> set[str]:
    """The functions of ``module`` that its own top-level statements call."""
    import ast

    tree = ast.parse(source_file(module).read_text())
    called: set[str] = set()
    for statement in tree.body:
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        called |= {node.func.id for node in ast.walk(statement)
                   if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    return called


def recheck_loading(mutants: list[Mutant]) -> None:
    """Test again, each in a fresh process, the survivors of functions run as their
    module loads; what each did is kept in mutants/import-time.json."""
    done: dict[str, str] = json.loads(LOADING.read_text()) if LOADING.exists() else {}
    loading = {m: called_as_loading(m) for m in {x.module for x in mutants}}
    todo = [m for m in mutants if m.status in UNKILLED and m.function in loading[m.module]
            and m.name not in done]
    if todo and fresh_pytest(None) != 0:
        sys.exit("the loading suites fail without any mutant: fix them first "
                 f"({' '.join(loading_tests())}, run in mutants/)")
    for n, mutant in enumerate(todo, 1):
        print(f"run as its module loads ({n}/{len(todo)}): {mutant.name}", flush=True)
        code = fresh_pytest(mutant.name)
        # pytest: 1 a test failed, 2 collection failed (the mutant broke an import), 3 an
        # internal error, 4 a conftest that no longer imports (the same arguments passed
        # with no mutant, above): each a kill
        done[mutant.name] = ("timeout" if code is None else "killed" if code in (1, 2, 3, 4)
                             else "survived" if code == 0 else "other")
        LOADING.write_text(json.dumps(done, indent=1))


def results(prefixes: list[str]) -> list[Mutant]:
    found = []
    loaded: dict[str, str] = json.loads(LOADING.read_text()) if LOADING.exists() else {}
    for meta in sorted((ROOT / "mutants" / "src").rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        for name, code in codes.items():
            mutant = parse_name(name, loaded.get(name) or STATUS.get(code, "other"))
            if within(mutant, prefixes):
                found.append(mutant)
    if not found:
        sys.exit("no results for these modules under mutants/: run without --report first")
    return found


def change(mutant: Mutant) -> Change:
    """The lines mutmut changed, stripped (its diff of the one function)."""
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        diff = get_diff_for_mutant(mutant.name, path=source_file(mutant.module))
    finally:
        os.chdir(cwd)
    lines = [x for x in diff.splitlines()[2:] if not x.startswith("@@")]
    first = next((n for n, x in enumerate(lines) if x.startswith("-")), len(lines))
    return Change("\n".join(x[1:].strip() for x in lines if x.startswith("-")),
                  "\n".join(x[1:].strip() for x in lines if x.startswith("+")),
                  "\n".join(x[1:] for x in lines[:first + 1] if not x.startswith("+")))


# -- equivalents --------------------------------------------------------------

SQL_KEYWORD = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE|ALTER|WHERE|FROM|SET|AND|OR|"
                         r"NOT|VALUES|ORDER BY|LIMIT|RETURNING|PRAGMA)\b", re.IGNORECASE)
# what SQL reads case by case: quoted values, and parameters (named or not)
SQL_EXACT = re.compile(r"'[^']*'|%\(\w+\)s|%s|:\w+")


def sql_case_only(found: Change) -> bool:
    """Only the case of SQL keywords or unquoted names changed, in a query string.

    SQL reads those whatever their case; a change inside a quoted SQL value or
    of a parameter's name is not this kind and must be killed.
    """
    before, after = found.before, found.after
    if before == after or before.lower() != after.lower() or len(before) != len(after):
        return False
    if not SQL_KEYWORD.search(before):
        return False
    exact = {i for part in SQL_EXACT.finditer(before) for i in range(*part.span())}
    return all(i not in exact for i, (a, b) in enumerate(zip(before, after, strict=True))
               if a != b)


KINDS = {"sql-case": sql_case_only}


@dataclass(frozen=True)
class Equivalent:
    module: str
    function: str
    before: str
    after: str
    kind: str
    why: str

    def matches(self, mutant: Mutant, found: Change) -> bool:
        if not fnmatch.fnmatchcase(mutant.module, self.module):
            return False
        if self.kind:
            return KINDS[self.kind](found)
        return (mutant.function, found.before, found.after) == (
            self.function, self.before.strip(), self.after.strip())


def equivalents() -> list[Equivalent]:
    listed = tomllib.loads(EQUIVALENTS.read_text())
    out = []
    for entry in listed.get("kind", []):
        if entry["name"] not in KINDS:
            sys.exit(f"{EQUIVALENTS.name}: unknown kind {entry['name']!r}")
        patterns = entry["modules"]
        for pattern in [patterns] if isinstance(patterns, str) else patterns:
            out.append(Equivalent(pattern, "", "", "", entry["name"], entry["why"]))
    for entry in listed.get("mutant", []):
        before = "\n".join(x.strip() for x in entry["before"].strip().splitlines())
        after = "\n".join(x.strip() for x in entry["after"].strip().splitlines())
        out.append(Equivalent(entry["module"], entry["function"], before, after, "",
                              entry["why"]))
    return out


# -- the report ---------------------------------------------------------------

def score(counts: Counter[str]) -> str:
    total = sum(counts.values()) - counts["equivalent"]
    caught = counts["killed"] + counts["timeout"]
    return f"{100 * caught / total:5.1f}%" if total else "    -"


def report(mutants: list[Mutant], show: bool) -> int:
    listed = equivalents()
    used: set[Equivalent] = set()
    per_module: dict[str, Counter[str]] = {}
    left: list[tuple[Mutant, Change]] = []
    for mutant in mutants:
        counts = per_module.setdefault(mutant.module, Counter())
        status = mutant.status
        if status in UNKILLED:
            found = change(mutant)
            hit = next((e for e in listed if e.matches(mutant, found)), None)
            if hit is not None:
                used.add(hit)
                status = "equivalent"
            else:
                left.append((mutant, found))
        counts[status] += 1
    width = max(len(m) for m in per_module) + 2
    print(f"\n{'module':<{width}}" + "".join(f"{c:>11}" for c in COLUMNS) + "      score")
    total: Counter[str] = Counter()
    for module in sorted(per_module):
        counts = per_module[module]
        total.update(counts)
        print(f"{module:<{width}}" + "".join(f"{counts[c]:>11}" for c in COLUMNS)
              + f"     {score(counts)}")
    print(f"{'all':<{width}}" + "".join(f"{total[c]:>11}" for c in COLUMNS)
          + f"     {score(total)}")
    if show and left:
        print(f"\n{len(left)} mutant(s) neither killed nor listed as equivalent:")
        for mutant, found in left:
            print(f"\n# {mutant.name} ({mutant.status}) in {mutant.function}")
            print("\n".join(f"- {x}" for x in found.before.splitlines()))
            print("\n".join(f"+ {x}" for x in found.after.splitlines()))
    modules = set(per_module)
    stale = [e for e in listed if not e.kind and e not in used and e.module in modules]
    for entry in stale:
        print(f"\nlisted as equivalent but no longer a survivor: {entry.module} "
              f"{entry.function}: {entry.before!r} -> {entry.after!r}")
    return 1 if left else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", nargs="+",
                        help="rules, sqlite, postgres, or one module: rules.timers")
    parser.add_argument("--report", action="store_true",
                        help="score the results already in mutants/; run nothing")
    parser.add_argument("--jobs", type=int, default=2, help="mutants tested at once (2)")
    parser.add_argument("--keep", action="store_true",
                        help="reuse mutants/ from an earlier run instead of starting afresh")
    parser.add_argument("--survivors", action="store_true",
                        help="test again only the mutants of the last run not killed "
                             "(after tests were added) and those of functions changed "
                             "since, keeping the rest of its results")
    parser.add_argument("--quiet", action="store_true",
                        help="the scores only, not the surviving mutants' changes")
    args = parser.parse_args()
    prefixes = targets(args.target)
    restore()  # what a run stopped by a signal left set aside
    if args.survivors:
        # and those of functions changed since, which mutmut finds unchecked
        left = {m.name for m in results(prefixes) if m.status in UNKILLED}
        run_mutmut(lambda m, code: m.name in left or (code is None and within(m, prefixes)),
                   prefixes, args.jobs, keep=True)
        recheck_loading(results(prefixes))
    elif not args.report:
        LOADING.unlink(missing_ok=True)  # code that changed since is tested again
        run_mutmut(lambda m, code: code in (None, SET_ASIDE) and within(m, prefixes),
                   prefixes, args.jobs, args.keep)
        recheck_loading(results(prefixes))
    return report(results(prefixes), not args.quiet)


if __name__ == "__main__":
    sys.exit(main())
