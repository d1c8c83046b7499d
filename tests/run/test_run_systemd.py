"""`agentbox systemd`: user units for run, dispatch and serve, checked by systemd itself."""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentbox.cli import systemd_cmd
from agentbox.cli.systemd_cmd import environment_item, exec_line, systemd_path, systemd_quote
from agentbox.errors import UsageError


def generate(cli, *argv: str) -> dict[str, str]:
    result = cli("systemd", "--json", *argv)
    assert result.code == 0, result.err
    return {u["name"]: u["text"] for u in json.loads(result.out)["units"]}


def setting(unit: str, key: str) -> list[str]:
    return [line.split("=", 1)[1] for line in unit.splitlines() if line.startswith(key + "=")]


def exec_start(unit: str) -> list[str]:
    [line] = setting(unit, "ExecStart")
    program, *args = shlex.split(line.replace("%%", "%"))
    return [program, *(a.replace("$$", "$") for a in args)]


def test_timers_fire_run_and_dispatch(cli, home):
    found = generate(cli, "--every", "5m", "--via", "tee -a 'sent log'",
                     "--", "python3", "agent.py", "--tag", "a b%c")
    assert sorted(found) == ["agentbox-alice-dispatch.service", "agentbox-alice-dispatch.timer",
                             "agentbox-alice-run.service", "agentbox-alice-run.timer"]
    run, dispatch = found["agentbox-alice-run.service"], found["agentbox-alice-dispatch.service"]
    prefix = [sys.executable, "-m", "agentbox", "--user", "alice"]
    assert exec_start(run) == [*prefix, "run", "--until-empty", "--",
                               shutil.which("python3"), "agent.py", "--tag", "a b%c"]
    assert exec_start(dispatch) == [*prefix, "dispatch", "--", shutil.which("tee"), "-a",
                                    "sent log"]
    for service in (run, dispatch):
        assert setting(service, "Type") == ["oneshot"]
        assert setting(service, "SuccessExitStatus") == ["75 143"]
        assert setting(service, "KillMode") == ["mixed"]  # SIGTERM reaches agentbox alone
        assert setting(service, "Environment") == [f'"AGENTBOX_HOME={home.resolve()}"']
        assert setting(service, "WorkingDirectory") == [os.getcwd()]
        assert "[Install]" not in service  # the timer is what gets enabled
    for command in ("run", "dispatch"):
        timer = found[f"agentbox-alice-{command}.timer"]
        assert setting(timer, "OnBootSec") == setting(timer, "OnUnitActiveSec") == ["5m"]
        assert setting(timer, "Unit") == [f"agentbox-alice-{command}.service"]
        assert setting(timer, "WantedBy") == ["timers.target"]
        assert "Persistent" not in timer  # it would act on OnCalendar= only


def test_watch_makes_long_running_services(cli):
    found = generate(cli, "--watch", "--serve", "--listen", "[::1]:9000", "--", "/bin/true")
    assert sorted(found) == ["agentbox-alice-dispatch.service", "agentbox-alice-run.service",
                             "agentbox-alice-serve.service"]
    tails = {name: exec_start(text)[5:] for name, text in found.items()}
    assert tails == {"agentbox-alice-run.service": ["run", "--watch", "--", "/bin/true"],
                     "agentbox-alice-dispatch.service": ["dispatch", "--watch"],
                     "agentbox-alice-serve.service": ["serve", "--listen", "[::1]:9000"]}
    for service in found.values():
        assert setting(service, "Type") == ["exec"]
        assert setting(service, "Restart") == ["on-failure"]
        assert setting(service, "KillMode") == ["mixed"]
        assert setting(service, "TimeoutStopSec") == ["30s"]
        assert setting(service, "WantedBy") == ["default.target"]
        assert "SuccessExitStatus" not in service  # a clean stop exits 0


def test_the_dispatch_service_serves_every_channel(cli):
    from agentbox import paths

    paths.config_path().parent.mkdir(parents=True, exist_ok=True)
    paths.config_path().write_text('[channels.sms]\nsender = "/bin/true"\ngap = "4h"\n')
    result = cli("systemd", "--watch", "--", "/bin/true")
    assert result.code == 0, result.err
    assert "the dispatch service serves every channel: default, sms" in result.err
    found = generate(cli, "--watch", "--", "/bin/true")
    # One `dispatch --watch` serves them all, each by its own sender and gap.
    assert exec_start(found["agentbox-alice-dispatch.service"])[5:] == ["dispatch", "--watch"]


def test_serve_joins_the_timers_too(cli):
    found = generate(cli, "--serve", "--", "/bin/true")
    assert "agentbox-alice-serve.service" in found and "agentbox-alice-run.timer" in found
    assert exec_start(found["agentbox-alice-serve.service"])[5:] == [
        "serve", "--listen", "127.0.0.1:8787"]


def test_no_unit_needs_a_system_only_target(cli, tmp_path):
    env = tmp_path / "env"
    env.write_text("")
    env.chmod(0o600)
    for watch, serve, env_file in itertools.product((False, True), repeat=3):
        flags = [*(["--watch"] if watch else []), *(["--serve"] if serve else []),
                 *(["--env-file", str(env)] if env_file else [])]
        for text in generate(cli, *flags, "--", "/bin/true").values():
            assert "network-online.target" not in text and "multi-user.target" not in text


def test_bad_flags_are_usage_errors(cli, tmp_path):
    assert cli("systemd", "--every", "often").code == 2
    assert cli("systemd", "--watch", "--every", "1m").code == 2
    assert cli("systemd", "--serve", "--listen", "8787").code == 2
    assert cli("systemd", "--serve", "--listen", "localhost:99999").code == 2
    assert cli("systemd", "--env-file", str(tmp_path / "missing")).code == 2
    assert cli("systemd", "--install", "--dir", str(tmp_path)).code == 2
    assert cli("systemd", "--handler", "x", "--", "y").code == 2


def test_the_handler_and_sender_may_come_from_config(cli):
    result = cli("systemd")
    assert result.code == 0
    assert "no handler is configured yet" in result.err
    assert "no sender is configured yet" in result.err
    assert "# agentbox-alice-run.service" in result.out and "OnUnitActiveSec=1m" in result.out
    found = generate(cli)
    assert exec_start(found["agentbox-alice-run.service"])[-2:] == ["run", "--until-empty"]
    assert exec_start(found["agentbox-alice-dispatch.service"])[-1] == "dispatch"
    assert cli("config", "set", "handler", "python3 agent.py").code == 0
    assert cli("config", "set", "sender", "mail me@example.com").code == 0
    assert cli("systemd").err == ""


def test_env_file_is_named_and_its_permissions_checked(cli, tmp_path):
    env = tmp_path / "secrets dir" / "agent.env"
    env.parent.mkdir()
    env.write_text("API_KEY=abc\n")
    env.chmod(0o644)
    result = cli("systemd", "--json", "--env-file", str(env), "--", "/bin/true")
    assert result.code == 0
    assert "can be read or changed by other users (mode 644)" in result.err
    assert "chmod 600" in result.err
    for unit in json.loads(result.out)["units"]:
        if unit["name"].endswith(".service"):
            assert setting(unit["text"], "EnvironmentFile") == [str(env)]
    env.chmod(0o600)
    assert "other users" not in cli("systemd", "--env-file", str(env), "--", "/bin/true").err
    glob = tmp_path / "a*.env"
    glob.write_text("")
    assert cli("systemd", "--env-file", str(glob), "--", "/bin/true").code == 2


def test_install_writes_the_user_folder_and_prints_the_systemctl_lines(
        cli, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    folder = tmp_path / "config" / "systemd" / "user"
    assert cli("config", "set", "sender", "/bin/cat").code == 0
    result = cli("systemd", "--install", "--", "/bin/true")
    assert result.code == 0, result.err
    assert result.out.splitlines() == [
        "systemctl --user daemon-reload",
        "systemctl --user enable --now agentbox-alice-run.timer agentbox-alice-dispatch.timer"]
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["agentbox-alice-dispatch.service", "agentbox-alice-dispatch.timer",
                     "agentbox-alice-run.service", "agentbox-alice-run.timer"]
    assert f"wrote {folder / 'agentbox-alice-run.timer'}" in result.err

    again = cli("systemd", "--install", "--json", "--", "/bin/true")
    assert again.code == 0  # the same units again: nothing to refuse
    doc = json.loads(again.out)
    assert {u["written"] for u in doc["units"]} == {"unchanged"}
    assert doc["commands"][0] == "systemctl --user daemon-reload"

    before = {p.name: p.read_text() for p in folder.iterdir()}
    other = cli("systemd", "--install", "--every", "5m", "--", "/bin/true")
    assert other.code == 3  # the request stands, not as asked: the files differ
    assert other.err.count("\n") == 1 and "nothing was written" in other.err
    assert "--force" in other.err and str(folder / "agentbox-alice-run.timer") in other.err
    assert {p.name: p.read_text() for p in folder.iterdir()} == before  # nothing written

    forced = cli("systemd", "--install", "--force", "--every", "5m", "--", "/bin/true")
    assert forced.code == 0, forced.err
    assert "OnUnitActiveSec=5m" in (folder / "agentbox-alice-run.timer").read_text()
    assert f"replaced {folder / 'agentbox-alice-run.timer'}" in forced.err

    watch = cli("systemd", "--install", "--force", "--watch", "--serve", "--", "/bin/true")
    assert watch.out.splitlines()[-1] == (
        "systemctl --user enable --now agentbox-alice-run.service "
        "agentbox-alice-dispatch.service agentbox-alice-serve.service")


def test_dir_writes_there_and_lists_the_files(cli, tmp_path):
    target = tmp_path / "units"
    result = cli("systemd", "--dir", str(target), "--", "/bin/true")
    assert result.code == 0, result.err
    assert sorted(result.out.splitlines()) == sorted(str(p) for p in target.iterdir())


@pytest.mark.parametrize(("word", "spelled"), [
    ("plain/path-1.py", "plain/path-1.py"),
    ("50%", "50%%"),
    ("$HOME", "$$HOME"),
    ("two words", '"two words"'),
    ('say "hi"\\', '"say \\"hi\\"\\\\"'),
    ("", '""'),
    (";", '";"'),  # a bare ; would separate two command lines
    ("tab\there\x01", '"tab\\there\\x01"'),
])
def test_systemd_quoting(word, spelled):
    assert systemd_quote(word) == spelled


def test_the_program_keeps_its_dollars():
    assert exec_line(["/opt/$x/a b", "$x"]) == '"/opt/$x/a b" $$x'


def test_environment_and_path_spelling():
    assert environment_item("AGENTBOX_HOME", "/a b/$x%") == '"AGENTBOX_HOME=/a b/$x%%"'
    assert systemd_path("/a b/50%", "--env-file") == "/a b/50%%"  # raw: no quotes
    for bad in ("/a\nb", "/a ", " /a", "/a\\"):
        with pytest.raises(UsageError):
            systemd_path(bad, "--env-file")


# -- systemd's own check ------------------------------------------------------------


def _analyze() -> str:
    found = shutil.which("systemd-analyze")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is missing; CI must install it (package systemd)")
        pytest.skip("systemd-analyze is not installed")
    return found


def verify(files: list[Path], runtime: Path) -> tuple[int, list[str]]:
    """systemd-analyze --user verify: its exit code and every line naming one of ``files``."""
    runtime.mkdir(mode=0o700, exist_ok=True)
    check = subprocess.run([_analyze(), "--user", "verify", *map(str, files)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
    names = {f.name for f in files}
    return check.returncode, [line for line in check.stderr.splitlines()
                              if any(name in line for name in names)]


def test_systemd_analyze_verify_accepts_every_unit(cli, tmp_path, monkeypatch):
    _analyze()
    spaced = tmp_path / "a b%c $d"
    spaced.mkdir()
    home = spaced / "agentbox home"
    monkeypatch.setenv("AGENTBOX_HOME", str(home))
    script = spaced / "bin dir" / "agentbox"  # this agentbox, installed under a spaced path
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m agentbox \"$@\"\n")
    script.chmod(0o755)
    monkeypatch.setattr(sys, "argv", [str(script)])
    handler = spaced / "my agent.py"
    handler.write_text("")
    env = spaced / "agent env"
    env.write_text("API_KEY=x\n")
    env.chmod(0o600)
    monkeypatch.chdir(spaced)
    for watch, serve, env_file in itertools.product((False, True), repeat=3):
        target = tmp_path / f"units-{watch:d}{serve:d}{env_file:d}"
        flags = [*(["--watch"] if watch else []), *(["--serve"] if serve else []),
                 *(["--env-file", str(env)] if env_file else [])]
        result = cli("systemd", "--dir", str(target), *flags, "--via", "/bin/cat -",
                     "--", sys.executable, str(handler), "--note", "50% of $HOME's \"stuff\"")
        assert result.code == 0, result.err
        files = sorted(target.iterdir())
        assert len(files) == (2 if watch else 4) + serve
        code, complaints = verify(files, tmp_path / "runtime")
        assert code == 0 and complaints == [], (flags, complaints)
        run = (target / "agentbox-alice-run.service").read_text()
        assert setting(run, "WorkingDirectory") == [str(spaced).replace("%", "%%")]
        assert exec_start(run)[0] == str(script)
        assert exec_start(run)[-4:] == [sys.executable, str(handler), "--note",
                                        "50% of $HOME's \"stuff\""]


def test_systemd_analyze_verify_catches_what_it_should(tmp_path):
    """The check is worth something: the old mistakes fail it."""
    _analyze()
    folder = tmp_path / "a b"
    folder.mkdir()
    good = ("[Service]\nType=oneshot\nWorkingDirectory={wd}\n"
            "ExecStart={exe} -c pass\n")
    cases = {
        "quoted-dir.service": good.format(wd=f'"{folder}"', exe=sys.executable),
        "relative.service": good.format(wd=folder, exe=sys.executable.lstrip("/")),
    }
    for name, text in cases.items():
        (folder / name).write_text(text)
        code, complaints = verify([folder / name], tmp_path / "runtime")
        assert code != 0 and complaints, name


# -- hardening ------------------------------------------------------------------------

SANDBOX = (*systemd_cmd.IN_USER_NAMESPACE, *systemd_cmd.HARDENING)


def _services(found: dict[str, str]) -> dict[str, str]:
    return {name: text for name, text in found.items() if name.endswith(".service")}


@pytest.fixture
def userns(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host lets the user manager make user namespaces, whatever the machine says."""
    monkeypatch.setattr(systemd_cmd, "USERNS_OFF", {})


@pytest.mark.sqlite_file  # the inbox files' folder is what the services may write
def test_every_service_is_sandboxed_writing_only_the_inbox_and_its_folder(
        cli, home, tmp_path, monkeypatch, userns):
    work = tmp_path / "agent dir"
    work.mkdir()
    monkeypatch.chdir(work)
    for flags in ([], ["--watch", "--serve"]):
        for text in _services(generate(cli, *flags, "--", "/bin/true")).values():
            lines = text.splitlines()
            assert all(line in lines for line in SANDBOX), text
            assert setting(text, "ReadWritePaths") == [str(home.resolve() / "inboxes"),
                                                       f'"{work}"']
            assert "PrivateTmp=yes" not in lines  # the inbox is under /tmp here
            for rejected in ("MemoryDenyWriteExecute", "RestrictNamespaces",
                             "SystemCallFilter", "PrivateDevices", "PrivateNetwork"):
                assert not setting(text, rejected), rejected
    assert (home / "inboxes").is_dir()  # made now: a read-only home could not make it later


def test_private_tmp_when_nothing_needed_lies_under_tmp(cli, monkeypatch, userns):
    monkeypatch.setattr(systemd_cmd, "_TEMPORARY", ("/no-such-tmp",))
    for text in _services(generate(cli, "--", "/bin/true")).values():
        assert setting(text, "PrivateTmp") == ["yes"]
    # a handler's file there would vanish behind a private /tmp
    found = generate(cli, "--", "/bin/sh", "/no-such-tmp/agent.sh")
    assert not setting(found["agentbox-alice-run.service"], "PrivateTmp")


def test_a_db_file_is_writable_where_it_is_and_postgresql_needs_no_folder(
        cli, tmp_path, userns):
    db = tmp_path / "elsewhere" / "inbox.sqlite3"
    db.parent.mkdir()
    found = _services(generate(cli, "--db", str(db), "--", "/bin/true"))
    for text in found.values():
        assert setting(text, "ReadWritePaths")[0] == str(db.parent.resolve())
    found = _services(generate(cli, "--db", "postgresql://agent@db.internal/agents",
                               "--", "/bin/true"))
    for text in found.values():
        assert setting(text, "ReadWritePaths") == [os.getcwd()]


def test_without_user_namespaces_what_needs_one_is_left_out(cli, tmp_path, monkeypatch):
    switch = tmp_path / "max_user_namespaces"
    switch.write_text("0\n")
    monkeypatch.setattr(systemd_cmd, "USERNS_OFF", {str(switch): "0"})
    result = cli("systemd", "--json", "--", "/bin/true")
    assert result.code == 0
    assert f"{switch} turns unprivileged user namespaces off" in result.err
    for unit in json.loads(result.out)["units"]:
        if unit["name"].endswith(".service"):
            lines = unit["text"].splitlines()
            assert not any(line in lines for line in systemd_cmd.IN_USER_NAMESPACE)
            assert all(line in lines for line in systemd_cmd.HARDENING)
    switch.write_text("15000\n")
    assert "user namespaces" not in cli("systemd", "--", "/bin/true").err


def test_the_path_list_spelling():
    assert systemd_cmd.path_item("/home/a/inboxes") == "/home/a/inboxes"
    assert systemd_cmd.path_item("/a b/$x%") == '"/a b/$x%%"'  # $ is literal there


def _exposure(unit: Path, runtime: Path) -> float:
    """systemd-analyze's overall exposure level of one unit file (0 safe .. 10 unsafe)."""
    runtime.mkdir(mode=0o700, exist_ok=True)
    check = subprocess.run([_analyze(), "--user", "security", "--offline=true", str(unit)],
                           capture_output=True, text=True, timeout=120,
                           env={**os.environ, "XDG_RUNTIME_DIR": str(runtime)})
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d)", check.stdout)
    assert found, check.stdout + check.stderr
    return float(found[1])


HARDENED = 4.8  # what the sandbox reaches with everything but PrivateTmp= (4.6 with it)
UNHARDENED = 9.8  # the same units without it: systemd-analyze's "UNSAFE"


def test_systemd_analyze_security_scores_every_service(cli, tmp_path, monkeypatch, capsys,
                                                       userns):
    _analyze()
    target = tmp_path / "units"
    assert cli("systemd", "--dir", str(target), "--watch", "--serve", "--",
               "/bin/true").code == 0
    sandbox = {*SANDBOX, "PrivateTmp=yes"}
    scores = {}
    for unit in sorted(target.iterdir()):
        bare = tmp_path / "bare" / unit.name
        bare.parent.mkdir(exist_ok=True)
        bare.write_text("".join(line for line in unit.read_text().splitlines(keepends=True)
                                if line.strip() not in sandbox
                                and not line.startswith("ReadWritePaths=")))
        scores[unit.name] = (_exposure(bare, tmp_path / "runtime"),
                             _exposure(unit, tmp_path / "runtime"))
    with capsys.disabled():
        print("\nsystemd-analyze --user security, before -> after: " + ", ".join(
            f"{name} {before} -> {after}" for name, (before, after) in scores.items()))
    for name, (before, after) in scores.items():
        assert before >= UNHARDENED and after <= HARDENED, (name, before, after)
