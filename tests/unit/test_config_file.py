"""config.toml: defaults < config < per-user config < flags; writes are checked and atomic."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from agentbox import config
from agentbox.errors import UsageError
from agentbox.rules.policy import Policy


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_missing_file_means_defaults(tmp_path: Path) -> None:
    settings = config.resolve(tmp_path / "absent.toml", "alice")
    assert settings.policy == Policy()
    assert settings.handler is None and settings.sender is None
    assert set(settings.origins.values()) == {"default"}


def test_layers(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", """
max_attempts = 5
lease_ttl = "2m"
handler = "python3 agent.py"
[users.alice]
lease_ttl = "15m"
outbox_gap = 60
sender = ["notify-send", "agent"]
[users.bob]
max_attempts = 9
""")
    alice = config.resolve(path, "alice", {"max_batch": 7, "retry_backoff": None})
    assert alice.policy.max_attempts == 5 and alice.policy.lease_ttl == 900
    assert alice.policy.outbox_gap == 60 and alice.policy.max_batch == 7
    assert alice.handler == ["python3", "agent.py"] and alice.sender == ["notify-send", "agent"]
    assert alice.origins["max_attempts"] == "config"
    assert alice.origins["lease_ttl"] == "config [users.alice]"
    assert alice.origins["max_batch"] == "flag"
    assert alice.origins["retry_backoff"] == "default"  # a None flag is no flag
    bob = config.resolve(path, "bob")
    assert bob.policy.max_attempts == 9 and bob.policy.lease_ttl == 120


def test_a_file_that_cannot_be_read_stops_at_once(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "max_batch = = 1")
    with pytest.raises(UsageError) as caught:
        config.resolve(path, "alice")
    assert "invalid TOML" in str(caught.value) and str(path) in str(caught.value)


@pytest.mark.parametrize(("text", "key", "needle"), [
    ("retry_backoff = -1", "retry_backoff", "retry_backoff"),
    ("lease_ttl = 2.5", "lease_ttl", "lease_ttl"),
    ("sender = []", "sender", "cannot be empty"),
    ("[users.alice]\ndelivery = 1", "delivery", "[users.alice]"),
])
def test_a_bad_value_stops_only_what_reads_it(tmp_path: Path, text: str, key: str,
                                              needle: str) -> None:
    path = write(tmp_path / "c.toml", text)
    settings = config.resolve(path, "alice")
    assert settings.value("max_payload") == Policy().max_payload  # another key reads fine
    with pytest.raises(UsageError) as caught:
        settings.value(key)
    assert needle in str(caught.value) and str(path) in str(caught.value)
    if key in Policy._fields:  # the rules take every knob at once
        with pytest.raises(UsageError):
            settings.policy  # noqa: B018
    assert config.findings(path) == [str(caught.value)]


def test_a_later_layer_covers_a_bad_value(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", 'outbox_gap = "soon"\n[users.alice]\noutbox_gap = 60\n')
    assert config.resolve(path, "alice").policy.outbox_gap == 60
    assert config.resolve(path, "bob", {"outbox_gap": 90}).policy.outbox_gap == 90
    with pytest.raises(UsageError):
        config.resolve(path, "bob").policy  # noqa: B018
    assert config.resolve(path, "bob").origins["outbox_gap"] == "config"


def test_an_unknown_key_is_a_warning_once_and_ignored(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", 'max_atempts = 5\n[users.alice]\nzzz = 1\n')
    with pytest.warns(config.ConfigWarning) as said:
        for _ in range(3):
            assert config.resolve(path, "alice").policy == Policy()
    assert [str(w.message) for w in said] == [
        f"{path}: unknown setting 'max_atempts' is ignored; did you mean 'max_attempts'?",
        f"{path} [users.alice]: unknown setting 'zzz' is ignored; see `agentbox config show`"]
    assert len(config.findings(path)) == 2


def test_retry_backoff_zero_turns_it_off(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "retry_backoff = 0\n")
    assert config.resolve(path, "alice").policy.retry_backoff == 0


def test_set_value_types_and_scopes(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "config.toml"
    assert config.set_value(path, "max_batch", "10", None) == 10
    assert config.set_value(path, "lease_ttl", "90", "alice") == 90
    assert config.set_value(path, "outbox_gap", "1h", "alice") == "1h"
    assert config.set_value(path, "handler", "42", "alice") == "42"
    assert config.set_value(path, "delivery", "at-most-once", "bob") == "at-most-once"
    assert tomllib.loads(path.read_text()) == {
        "max_batch": 10,
        "users": {"alice": {"lease_ttl": 90, "outbox_gap": "1h", "handler": "42"},
                  "bob": {"delivery": "at-most-once"}}}
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
    assert sorted(p.name for p in path.parent.iterdir()) == [".config.toml.lock", "config.toml"]


def test_set_value_refuses_before_writing(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "max_batch = 3\n")
    for key, raw in (("max_batch", "0"), ("lease_ttl", "forever"), ("nope", "1")):
        with pytest.raises(UsageError):
            config.set_value(path, key, raw, "alice")
    assert path.read_text() == "max_batch = 3\n"


def test_set_value_refuses_a_users_entry_that_is_not_a_table(tmp_path: Path) -> None:
    path = write(tmp_path / "c.toml", "[users]\nalice = 3\n")
    with pytest.raises(UsageError, match=r"\[users.alice\] must be a table"):
        config.set_value(path, "max_batch", "2", "alice")
    assert path.read_text() == "[users]\nalice = 3\n"


@pytest.mark.parametrize(("raw", "argv"), [
    ("a b 'c d'", ["a", "b", "c d"]), (["x", "y z"], ["x", "y z"]),
])
def test_parse_command(raw: str | list[str], argv: list[str]) -> None:
    assert config.parse_command(raw) == argv


def _hold_lock(path: Path) -> int:
    """Take the config lock the way another writer would; returns the descriptor."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_writer_holding_the_lock_is_waited_for_then_busy(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from agentbox.errors import Busy

    path = tmp_path / "cfg" / "config.toml"
    monkeypatch.setattr(config, "LOCK_WAIT", 0.3)
    fd = _hold_lock(path)
    try:
        with pytest.raises(Busy, match="another `agentbox config`"):
            config.set_value(path, "max_batch", "5", None)
        assert not path.exists()
    finally:
        os.close(fd)
    assert config.set_value(path, "max_batch", "5", None) == 5
    assert stat.S_IMODE(path.with_name(".config.toml.lock").stat().st_mode) == 0o600


def test_a_symlinked_config_is_rewritten_where_it_points(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "agentbox.toml"
    real.parent.mkdir()
    real.write_text("max_attempts = 4\n")
    real.chmod(0o644)
    path = tmp_path / "cfg" / "config.toml"
    path.parent.mkdir()
    path.symlink_to(real)
    config.set_value(path, "max_batch", "9", "alice")
    assert path.is_symlink()
    assert tomllib.loads(real.read_text()) == {"max_attempts": 4,
                                               "users": {"alice": {"max_batch": 9}}}
    assert stat.S_IMODE(real.stat().st_mode) == 0o644
