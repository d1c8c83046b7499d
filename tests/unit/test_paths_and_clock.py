"""Where files live, whose inbox it is, and the pinned clock."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from agentbox import clock, paths
from agentbox.errors import BadInput


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("AGENTBOX_HOME", "AGENTBOX_USER", "AGENTBOX_NOW"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_home_overrides_data_and_config(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("AGENTBOX_HOME", str(tmp_path))
    assert paths.data_dir() == tmp_path
    assert paths.config_path() == tmp_path / "config.toml"
    assert paths.inbox_path("bob") == tmp_path / "inboxes" / "bob.sqlite3"


def test_platform_folders_without_home(clean_env: pytest.MonkeyPatch) -> None:
    import platformdirs

    assert paths.home() is None
    assert paths.data_dir() == platformdirs.user_data_path("agentbox")
    assert paths.config_path() == platformdirs.user_config_path("agentbox") / "config.toml"
    clean_env.setenv("AGENTBOX_HOME", "")  # empty counts as unset
    assert paths.home() is None


@pytest.mark.parametrize("name", ["a", "A" * 64, "x.y", "x_y", "x-y", "-x", "_", "9", "a.."])
def test_good_names(name: str) -> None:
    assert paths.check_user(name) == name


@pytest.mark.parametrize("name", [
    "", ".", "..", ".x", "a/b", "a\\b", "a b", "a\x00", "a\n", "A" * 65, "é", "a:b", "a*",
    "\u0661",  # an Arabic-Indic digit: a digit, but not ASCII
])
def test_bad_names(name: str) -> None:
    with pytest.raises(BadInput, match="invalid user name"):
        paths.check_user(name)
    with pytest.raises(BadInput):
        paths.inbox_path(name)


def test_long_bad_names_are_shortened_in_the_message() -> None:
    with pytest.raises(BadInput) as caught:
        paths.check_user("a" * 1000 + "/")
    assert len(str(caught.value)) < 200


def test_resolve_user_order(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LOGNAME", "login-name")
    assert paths.resolve_user(None) == "login-name"
    clean_env.setenv("AGENTBOX_USER", "")
    assert paths.resolve_user(None) == "login-name"
    clean_env.setenv("AGENTBOX_USER", "from-env")
    assert paths.resolve_user(None) == "from-env"
    assert paths.resolve_user("from-flag") == "from-flag"
    with pytest.raises(BadInput):
        paths.resolve_user("")  # an explicit empty flag is refused, not skipped


def test_private_dir_makes_every_missing_parent_0700(tmp_path: Path) -> None:
    import os

    tmp_path.chmod(0o755)
    old = os.umask(0)
    try:
        leaf = paths.private_dir(tmp_path / "a" / "b" / "c")
        paths.private_dir(leaf)  # again: nothing to do, no error
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", leaf):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # an existing folder is left alone


def test_clock_pinned_and_real(clean_env: pytest.MonkeyPatch) -> None:
    import time

    assert not clock.pinned()
    assert abs(clock.now() - time.time()) < 5
    clean_env.setenv("AGENTBOX_NOW", "1000000")
    assert clock.pinned() and clock.now() == 1_000_000
    clean_env.setenv("AGENTBOX_NOW", "soon")
    with pytest.raises(BadInput, match="AGENTBOX_NOW"):
        clock.now()
