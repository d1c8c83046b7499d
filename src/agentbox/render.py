"""All output: human tables with rich, or stable JSON documents with ``--json``.

Commands build plain data (dicts and lists) and hand it here; nothing else
prints. rich is imported only when a table is drawn, so the commands that a
webhook receiver calls once per delivery never pay for it.

Human output is made safe for a terminal here, in one place: source ids,
errors, payloads and a handler's stderr are other people's words, and a
control character in them (``ESC ] 0 ;`` retitles the terminal, ``ESC [ 2 J``
clears it) is shown as a backslash escape instead (see
:func:`agentbox.spelling.printable`, which this module hands on with the other
spellings of values, so that commands need import only it). ``--json``
documents and :func:`data` keep the exact text.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from agentbox.spelling import printable as printable
from agentbox.spelling import size as size
from agentbox.spelling import when as when
from agentbox.spelling import when_in as when_in

PROG = "agentbox"
PROSE_WIDTH = 80  # running text wraps here even on a wider console: long lines are hard to read


def document(obj: Any) -> None:
    """One JSON document on stdout (``--json``)."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def json_line(obj: Any) -> None:
    """One compact JSON document on one line of stdout: what a watching command prints
    for each thing it does with ``--json`` (JSON lines)."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def data(text: str) -> None:
    """Text for a pipe, exactly as it is (a message body, a unit file), and a newline."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def line(text: str = "") -> None:
    """One line for people on stdout; control characters (newlines too) escaped."""
    data(printable(text))


def lines(texts: Iterable[str]) -> None:
    """Many lines for people, written at once: a 20,000-line report is one flush, not 20,000."""
    sys.stdout.write("".join(printable(text) + "\n" for text in texts))
    sys.stdout.flush()


def error(message: str) -> None:
    """The one line a failed command leaves on stderr."""
    first = " ".join(message.split())  # never more than one line
    sys.stderr.write(f"{PROG}: error: {printable(first)}\n")
    sys.stderr.flush()


def warning(message: str) -> None:
    """Something wrong that does not stop the command, as one line on stderr."""
    sys.stderr.write(f"{PROG}: warning: {printable(' '.join(message.split()))}\n")
    sys.stderr.flush()


def notice(message: str) -> None:
    """Information for the person at the terminal, on stderr so pipes stay clean."""
    sys.stderr.write(f"{PROG}: {printable(message)}\n")
    sys.stderr.flush()


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return printable(str(value), newlines=True)


def _console() -> Any:
    """A console that prints text as written: rich never reads it as markup.

    Cells carry users' own words (source ids, errors, payloads, actions), and
    a ``[/x]`` in one of them must show as itself, not fail the command.
    """
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, markup=False)


def _grid(columns: Sequence[str], rows: Sequence[Sequence[Any]],
          cell: Callable[[Any], Any], text: Collection[str] = ()) -> Any:
    """A bordered table: ``text`` columns wrap, the others stay whole on one line."""
    from rich.table import Table

    grid = Table(header_style="bold")
    for column in columns:
        grid.add_column(column, overflow="fold", no_wrap=column not in text)
    for row in rows:
        grid.add_row(*(cell(v) for v in row))
    return grid


MIN_TEXT = 16  # narrowest a free-text column may get before it moves under its row
GAP = 2  # spaces between the columns of the narrow layout


def _width(value: str) -> int:
    from rich.cells import cell_len

    return max(cell_len(part) for part in value.split("\n"))


def _fits(width: int, columns: Sequence[str], rows: Sequence[Sequence[str]],
          text: Collection[str]) -> bool:
    """Whether a bordered table keeps every whole column whole and each text column
    at least MIN_TEXT wide (or as wide as its widest cell) within ``width``."""
    need = 3 * len(columns) + 1  # borders and padding
    for n, column in enumerate(columns):
        widest = max(_width(v) for v in (column, *(row[n] for row in rows)))
        need += min(widest, MIN_TEXT) if column in text else widest
    return need <= width


def _stacked(width: int, columns: Sequence[str], rows: Sequence[Sequence[str]],
             title: str | None, text: Collection[str]) -> Any:
    """The narrow layout: one aligned line per row holding the whole columns, from
    the left, that fit in ``width``; under it, indented, each remaining column as
    ``name: value`` (free text wrapped to the full width; ``-`` left out)."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    widths: dict[int, int] = {}
    used = -GAP
    for n, column in enumerate(columns):
        if column in text:
            continue
        widest = max(_width(v) for v in (column, *(row[n] for row in rows)))
        if widths and used + GAP + widest > width:
            break  # this column and every whole one after it go under the row
        widths[n] = widest
        used += GAP + widest
    under = [n for n in range(len(columns)) if n not in widths]

    def strip(values: Sequence[str], style: str = "") -> Any:
        grid = Table(box=None, show_header=False, padding=(0, GAP, 0, 0), pad_edge=False)
        for width in widths.values():
            grid.add_column(width=width, no_wrap=True, overflow="fold", style=style)
        grid.add_row(*values)
        return grid

    parts: list[Any] = [Text(title)] if title else []
    parts.append(strip([columns[n] for n in widths], "bold"))
    for row in rows:
        parts.append(strip([row[n] for n in widths]))
        parts.extend(Padding(Text(f"{columns[n]}: {row[n]}"), (0, 0, 0, 4), expand=False)
                     for n in under if row[n] != "-")
    return Group(*parts)


def _titled(grid: Any, title: str | None, console: Any = None) -> None:
    """A table under its title. rich's own table title is padded with spaces
    to the table's width, which piped output should not carry."""
    from rich.text import Text

    console = console or _console()
    if title:
        console.print(Text(title, style="table.title"))
    console.print(grid)


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None,
          empty: str = "nothing to show", text: Collection[str] = ()) -> None:
    """A table on stdout; ``empty`` is said instead when there are no rows.

    Columns not named in ``text`` (ids, keys, states, times) are never split:
    they are what an operator copies into the next command. ``text`` columns
    (errors, bodies, payloads) wrap; when the whole columns leave them less
    than MIN_TEXT cells (an 80-column terminal, a pipe, long delivery ids),
    each row's free text goes on its own lines under the row instead.
    """
    if not rows:
        line(f"{title}: {empty}" if title else empty)
        return
    console = _console()
    cells = [[_cell(v) for v in row] for row in rows]
    if _fits(console.width, columns, cells, text):
        _titled(_grid(columns, cells, str, text), title, console)
    else:
        console.print(_stacked(console.width, columns, cells, title, text))


def records(items: Sequence[Mapping[str, Any]], columns: Sequence[str], as_json: bool,
            title: str | None = None, empty: str = "nothing to show",
            human: Mapping[str, Any] | None = None, text: Collection[str] = ()) -> None:
    """A listing: a JSON list of objects, or a table of the named columns.

    ``human`` maps a column to a function that formats its value for people
    (times, for instance); JSON always carries the raw values. ``text`` names
    the columns of free text (see :func:`table`).
    """
    if as_json:
        document(list(items))
        return
    shape = human or {}
    table(columns, [[shape[c](item.get(c)) if c in shape else item.get(c) for c in columns]
                    for item in items], title=title, empty=empty, text=text)


def pairs(items: Sequence[tuple[str, Any]], title: str | None = None) -> None:
    """A two-column key/value table, for one object."""
    from rich.table import Table

    grid = Table(show_header=False)
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    for key, value in items:
        grid.add_row(key, _cell(value))
    _titled(grid, title)


class Mark(NamedTuple):
    """A checklist cell: ✓ or ✗, followed by ``note`` when there is one."""

    ok: bool
    note: str = ""


def checklist(columns: Sequence[str], rows: Sequence[Sequence[Any]],
              title: str | None = None) -> None:
    """A table with verdicts: a cell that is exactly True or False (a count of
    1 or 0 is not), or a :class:`Mark`, is drawn as a green ✓ or a red ✗."""
    _titled(_grid(columns, rows, _verdict, text=columns), title)


def _verdict(value: Any) -> Any:
    from rich.text import Text

    if value is True or value is False:
        value = Mark(value)
    if isinstance(value, Mark):
        mark = Text("✓" if value.ok else "✗", style="bold green" if value.ok else "bold red")
        return mark.append(f" {printable(value.note)}") if value.note else mark
    return _cell(value)


def prose(text: str, indent: int = 0, bold: bool = False) -> None:
    """Running text on stdout, wrapped at the console's width or 80 columns,
    whichever is less; a blank line in ``text`` starts a new paragraph."""
    import textwrap

    from rich.text import Text

    console = _console()
    width = min(console.width, PROSE_WIDTH)
    margin = " " * indent
    paragraphs = [printable(" ".join(p.split())) for p in text.split("\n\n") if p.strip()]
    wrapped = "\n\n".join(textwrap.fill(p, width, initial_indent=margin,
                                         subsequent_indent=margin, break_on_hyphens=False)
                          for p in paragraphs)
    console.print(Text(wrapped, style="bold" if bold else ""))
