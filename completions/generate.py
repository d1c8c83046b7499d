"""Regenerate the shell completion scripts from the live CLI.

    python completions/generate.py           # rewrite the scripts beside this file
    python completions/generate.py --check   # exit 1 if any of them is stale

Each script is what ``_AGENTBOX_COMPLETE=source_<shell> agentbox`` prints
(Typer's spelling of click's ``<shell>_source``). The scripts call agentbox
back at completion time, so new commands and options complete without
regenerating; only a change in the completion machinery changes them.

Install: bash - ``source agentbox.bash`` from ~/.bashrc (or copy it into
bash-completion's completions folder); zsh - put ``_agentbox`` in a folder on
``$fpath``; fish - copy ``agentbox.fish`` into ~/.config/fish/completions/.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = {"bash": "agentbox.bash", "zsh": "_agentbox", "fish": "agentbox.fish"}


def generate(shell: str) -> str:
    """The completion script for ``shell``, as the installed agentbox prints it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("_AGENTBOX")}
    env["_AGENTBOX_COMPLETE"] = f"source_{shell}"
    done = subprocess.run([sys.executable, "-m", "agentbox"], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"agentbox printed no {shell} completion script: "
                           f"{done.stderr.strip() or done.returncode}")
    return done.stdout.strip("\n") + "\n"


def stale(folder: Path = HERE) -> list[str]:
    """Names of the committed scripts that differ from what the CLI generates now."""
    return [name for shell, name in SCRIPTS.items()
            if not (folder / name).is_file()
            or (folder / name).read_text(encoding="utf-8") != generate(shell)]


def write(folder: Path = HERE) -> list[Path]:
    written = []
    for shell, name in SCRIPTS.items():
        path = folder / name
        path.write_text(generate(shell), encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        names = stale()
        for name in names:
            print(f"completions/{name} is stale; run: python completions/generate.py",
                  file=sys.stderr)
        return 1 if names else 0
    if argv:
        print(__doc__, file=sys.stderr)
        return 2
    for path in write():
        print(f"wrote completions/{path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
