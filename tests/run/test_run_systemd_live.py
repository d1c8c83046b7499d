"""The hardened units under a real systemd user manager: run, dispatch and serve work,
and each sandboxing setting does what docs/operations-systemd.md says it does.

The handler probes its own sandbox (writes where it may and may not, its umask, its
privileges, the sockets it can open, its /tmp) and records what it found; the test
reads that record. Needs root, to start a manager for a throwaway user
(support/user_systemd.py); skipped, with the reason, where that cannot be done.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import user_systemd

pytestmark = pytest.mark.slow

PROBE = r'''
import json, os, socket, sys, time
batch = json.load(sys.stdin)
home = os.path.expanduser("~")
found = {"uid": os.getuid(), "events": len(batch["events"])}
def attempt(path):
    try:
        with open(path, "w") as fh:
            fh.write("x")
        return "ok"
    except OSError as exc:
        return exc.strerror
found["workdir"] = attempt("written-by-handler")
found["mode"] = oct(os.stat("written-by-handler").st_mode & 0o777)
found["home"] = attempt(os.path.join(home, "outside"))
found["extra"] = attempt(os.path.join(home, "extra", "x"))
found["etc"] = attempt("/etc/agentbox-probe")
found["tmp"] = "shared" if os.path.exists("MARK") else "private"
status = open("/proc/self/status").read()
found["no_new_privs"] = "NoNewPrivs:\t1" in status
found["cap_bounding"] = [l.split()[1] for l in status.splitlines() if l.startswith("CapBnd")][0]
for name in ("AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK", "AF_PACKET"):
    try:
        socket.socket(getattr(socket, name), socket.SOCK_DGRAM if name != "AF_PACKET"
                      else socket.SOCK_RAW).close()
        found[name] = "ok"
    except OSError as exc:
        found[name] = exc.strerror
with open(f"probe-{time.time_ns()}.json", "w") as fh:
    json.dump(found, fh)
json.dump({"messages": [f"handled {len(batch['events'])}"]}, sys.stdout)
'''

SCRIPT = r'''
set -eu
out="$RESULTS"
work="$HOME/my agent %d"
mkdir -p "$work" "$HOME/extra" && cd "$work"
cat > agent.py <<'PY'
{probe}
PY
cat > sender.py <<'PY'
import sys
with open("sent.txt", "a") as fh:
    fh.write(sys.stdin.read() + "\n")
PY
u=$(id -un)
port=18787
agentbox systemd --watch --serve --listen 127.0.0.1:$port --install --via "{python} sender.py" \
    -- {python} agent.py 2>"$out/systemd.err"
cp ~/.config/systemd/user/agentbox-$u-run.service "$out/run.service"
systemctl --user daemon-reload
services="agentbox-$u-run.service agentbox-$u-dispatch.service agentbox-$u-serve.service"
systemctl --user start $services
for _ in $(seq 50); do
  {python} -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null \
    && break
  sleep 0.2
done
agentbox ingest chat one --payload '{{"text": "one"}}' > "$out/ingest.txt"
{python} - <<PY > "$out/serve.txt"
import urllib.request
req = urllib.request.Request("http://127.0.0.1:$port/hooks/gh", data=b'{{"x": 1}}',
                             headers={{"Idempotency-Key": "d-1"}})
print(urllib.request.urlopen(req, timeout=10).read().decode())
PY
for _ in $(seq 100); do
  agentbox status --json > "$out/status-watch.json"
  [ -s sent.txt ] && grep -q '"done": 2' "$out/status-watch.json" && break
  sleep 0.2
done
systemctl --user stop $services
for s in run dispatch serve; do
  systemctl --user show -p Result --value agentbox-$u-$s.service > "$out/result-$s.txt"
done
# The timers' oneshot services, with a drop-in that lets the handler write one more folder.
agentbox systemd --install --force -- {python} agent.py 2>>"$out/systemd.err"
mkdir -p ~/.config/systemd/user/agentbox-$u-run.service.d
printf '[Service]\nReadWritePaths=%%h/extra\n' \
    > ~/.config/systemd/user/agentbox-$u-run.service.d/writable.conf
systemctl --user daemon-reload
agentbox ingest chat two --payload '{{"text": "two"}}' >> "$out/ingest.txt"
systemctl --user start agentbox-$u-run.service
systemctl --user show -p Result --value agentbox-$u-run.service > "$out/result-oneshot.txt"
agentbox status --json > "$out/status-oneshot.json"
cp probe-*.json sent.txt "$out/"
'''


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder the throwaway user can reach (pytest's own are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="agentbox-live-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder)


def test_run_dispatch_and_serve_work_in_their_sandbox(shared: Path) -> None:
    why = user_systemd.why_not()
    if why is not None:
        pytest.skip(f"no user systemd manager for a test here: {why}")
    results = shared / "results"
    results.mkdir()
    results.chmod(0o777)  # the throwaway user writes its findings here
    mark = shared / "mark"  # seen by a handler whose /tmp is the host's
    mark.touch()
    script = shared / "script.sh"
    script.write_text(SCRIPT.format(probe=PROBE.replace("MARK", str(mark)),
                                    python=sys.executable))
    done = user_systemd.run_as_user(script, shared, timeout=300, env={"RESULTS": str(results)})
    assert done.returncode == 0, (done.stdout, done.stderr,
                                  (shared / "manager.log").read_text(errors="replace"))

    run_unit = (results / "run.service").read_text()
    assert "PrivateUsers=yes" in run_unit.splitlines()
    private_tmp = "PrivateTmp=yes" in run_unit.splitlines()
    watch = json.loads((results / "status-watch.json").read_text())
    assert watch["events"]["done"] == 2  # one from the CLI, one through serve
    assert json.loads((results / "serve.txt").read_text())["outcome"] == "stored"
    assert "handled" in (results / "sent.txt").read_text()  # dispatch ran the sender
    for unit in ("run", "dispatch", "serve"):  # a stop is clean, not a failure
        assert (results / f"result-{unit}.txt").read_text().strip() == "success", unit
    assert (results / "result-oneshot.txt").read_text().strip() == "success"
    assert json.loads((results / "status-oneshot.json").read_text())["events"]["done"] == 3

    *watched, oneshot = (json.loads(p.read_text()) for p in sorted(results.glob("probe-*.json")))
    for found in (*watched, oneshot):
        assert found["workdir"] == "ok"  # ReadWritePaths= the working directory
        assert found["mode"] == "0o600"  # UMask=0077
        assert found["home"] == "Read-only file system"  # ProtectHome=read-only
        assert found["etc"] == "Read-only file system"  # ProtectSystem=strict
        assert found["no_new_privs"] is True  # NoNewPrivileges=yes
        assert int(found["cap_bounding"], 16) == 0  # CapabilityBoundingSet=
        for family in ("AF_INET", "AF_INET6", "AF_UNIX"):
            assert found[family] == "ok", family
        for family in ("AF_NETLINK", "AF_PACKET"):  # RestrictAddressFamilies=
            assert found[family] == "Address family not supported by protocol", family
        # PrivateTmp=: the handler's /tmp is its own (left out where agentbox lives in /tmp)
        assert found["tmp"] == ("private" if private_tmp else "shared")
    assert {found["extra"] for found in watched} == {"Read-only file system"}
    assert oneshot["extra"] == "ok"  # the drop-in's ReadWritePaths= adds to the unit's
