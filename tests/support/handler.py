"""The test handler program (the ``handler`` fixture's), and reading what it recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.processes import wait_for

HANDLER = r'''
import argparse, json, os, subprocess, sys, time

p = argparse.ArgumentParser()
p.add_argument("--started")                     # write our pid (and a grandchild's) here
p.add_argument("--grandchild", action="store_true")  # leave a `sleep` in our group
p.add_argument("--wait-for")                    # block until this file exists
p.add_argument("--sleep", type=float, default=0)
p.add_argument("--record")                      # append the batch and env as a JSON line
p.add_argument("--fail-on")                     # exit 1 if a payload carries this key
p.add_argument("--exit", type=int, default=0)
p.add_argument("--stderr", default="")
p.add_argument("--answer")                      # print this instead of the default answer
args = p.parse_args()

batch = json.loads(sys.stdin.read())
if args.record:
    env = {k: v for k, v in os.environ.items() if k.startswith("AGENTBOX_")}
    with open(args.record, "a") as fh:
        fh.write(json.dumps({"batch": batch, "env": env}) + "\n")
if args.started:
    pids = [os.getpid()]
    if args.grandchild:
        pids.append(subprocess.Popen(["sleep", "300"]).pid)
    with open(args.started + ".tmp", "w") as fh:
        fh.write(" ".join(map(str, pids)))
    os.replace(args.started + ".tmp", args.started)
if args.wait_for:
    deadline = time.monotonic() + 120
    while not os.path.exists(args.wait_for) and time.monotonic() < deadline:
        time.sleep(0.05)
time.sleep(args.sleep)
if args.stderr:
    print(args.stderr, file=sys.stderr)
if args.fail_on and any(args.fail_on in e["payload"] for e in batch["events"]):
    print("cannot handle " + args.fail_on, file=sys.stderr)
    sys.exit(1)
if args.exit:
    sys.exit(args.exit)
if args.answer is not None:
    sys.stdout.write(args.answer)
else:
    ids = ",".join(e["source_id"] for e in batch["events"])
    json.dump({"messages": ["handled " + ids]}, sys.stdout)
'''

def started_pids(path: Path) -> list[int]:
    """The pids the handler wrote with --started, once it has."""
    wait_for(path.exists, f"the handler to write {path.name}")
    return [int(p) for p in path.read_text().split()]


def records(path: Path) -> list[dict[str, object]]:
    """What the handler recorded: one {"batch", "env"} per run."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# A handler that appends each batch's user, its AGENTBOX_USER, its event ids and the
# time to the log named by its first argument, then sleeps as long as its second says:
# what the watching tests read back with logged_batches().
BATCH_LOGGER = r'''
import json, os, sys, time
batch = json.loads(sys.stdin.read())
line = json.dumps({"env_user": os.environ["AGENTBOX_USER"], "user": batch["user"],
                   "ids": [e["id"] for e in batch["events"]], "at": time.time()})
with open(sys.argv[1], "a") as fh:
    fh.write(line + "\n")
time.sleep(float(sys.argv[2]))
'''


def logged_batches(log: Path) -> list[dict[str, Any]]:
    """What BATCH_LOGGER wrote, one dict per batch; none before the first."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
