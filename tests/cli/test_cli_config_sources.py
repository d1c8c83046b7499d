"""`config set|unset|get sources.NAME.KEY` and the sources `config show` lists."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from support.fixtures import Cli


def shown(cli: Cli, *flags: str) -> dict[str, dict[str, Any]]:
    result = cli(*flags, "config", "show", "--json")
    assert result.code == 0, result.err
    return {row["key"]: row for row in json.loads(result.out)}


def written(home: Path) -> dict[str, Any]:
    return tomllib.loads((home / "config.toml").read_text())


def test_a_source_is_written_one_key_at_a_time(cli: Cli, home: Path) -> None:
    first = cli("config", "set", "--all-users", "sources.stripe.preset", "stripe")
    assert first.code == 0
    assert "serve will not start until this is settled" in first.err
    assert "preset stripe needs secret_env" in first.err
    second = cli("config", "set", "--all-users", "sources.stripe.secret_env", "STRIPE_SECRET")
    assert second.code == 0 and second.err == ""
    assert cli("config", "set", "sources.stripe.tolerance", "600").code == 0
    assert cli("config", "set", "sources.my.hooks.id_field", "data.id").code == 0
    assert written(home) == {
        "sources": {"stripe": {"preset": "stripe", "secret_env": "STRIPE_SECRET"}},
        "users": {"alice": {"sources": {"stripe": {"tolerance": 600},
                                        "my.hooks": {"id_field": "data.id"}}}}}
    rows = shown(cli)
    assert {k: (r["value"], r["origin"]) for k, r in rows.items() if k.startswith("sources.")} == {
        "sources.stripe.preset": ("stripe", "config [sources.stripe]"),
        "sources.stripe.id_field": ("id", "preset stripe"),
        "sources.stripe.secret_env": ("STRIPE_SECRET", "config [sources.stripe]"),
        "sources.stripe.signature": ("stripe", "preset stripe"),
        "sources.stripe.signature_header": ("Stripe-Signature", "default"),
        "sources.stripe.tolerance": (600, "config [users.alice.sources.stripe]"),
        "sources.my.hooks.id_field": ("data.id", "config [users.alice.sources.my.hooks]"),
    }
    assert all(row["help"] for row in rows.values())
    bob = shown(cli, "--user", "bob")  # the shared table, not alice's
    assert bob["sources.stripe.tolerance"]["value"] == 300
    assert "sources.my.hooks.id_field" not in bob
    table = cli("config", "show")
    assert table.code == 0 and "sources.stripe.id_field" in table.out


def test_get_a_sources_key(cli: Cli) -> None:
    assert cli("config", "set", "sources.gh.preset", "github").code == 0
    assert cli("config", "set", "sources.gh.secret_env", "GH").code == 0
    doc = json.loads(cli("config", "get", "sources.gh.id_header", "--json").out)
    assert (doc["value"], doc["origin"], doc["written"]) == (
        "X-GitHub-Delivery", "preset github", None)
    plain = json.loads(cli("config", "get", "sources.other.id_header", "--json").out)
    assert (plain["value"], plain["origin"]) == ("Idempotency-Key", "default")
    assert cli("config", "get", "sources.other.secret_env").out == (
        "sources.other.secret_env = -  (default)\n")


def test_a_users_id_place_replaces_the_shared_one(cli: Cli) -> None:
    assert cli("config", "set", "--all-users", "sources.s.id_header", "X-Id").code == 0
    assert cli("config", "set", "sources.s.id_field", "id").code == 0
    rows = shown(cli)
    assert rows["sources.s.id_field"]["value"] == "id"
    assert "sources.s.id_header" not in rows
    assert shown(cli, "--user", "bob")["sources.s.id_header"]["value"] == "X-Id"


def test_unset_removes_the_key_and_the_tables_it_empties(cli: Cli, home: Path,
                                                         one_error: Any) -> None:
    assert cli("config", "set", "max_batch", "7").code == 0
    assert cli("config", "set", "sources.a.id_header", "X-A").code == 0
    assert cli("config", "set", "sources.a.id_field", "id").code == 0  # noted, not refused
    assert cli("config", "set", "--all-users", "sources.b.id_header", "X-B").code == 0
    assert cli("config", "unset", "sources.a.id_header").code == 0
    assert written(home)["users"]["alice"]["sources"] == {"a": {"id_field": "id"}}
    assert cli("config", "unset", "sources.a.id_field").code == 0
    assert written(home) == {"sources": {"b": {"id_header": "X-B"}},
                             "users": {"alice": {"max_batch": 7}}}
    assert cli("config", "unset", "--all-users", "sources.b.id_header").code == 0
    assert written(home) == {"users": {"alice": {"max_batch": 7}}}
    again = cli("config", "unset", "sources.b.id_header", "--json")
    assert again.code == 0 and json.loads(again.out)["removed"] is False
    typo = cli("config", "unset", "sources.b.id_hedaer")
    assert typo.code == 2 and "unknown setting 'id_hedaer'" in one_error(typo.err)


def test_unset_repairs_a_typo_in_a_source_table(cli: Cli, home: Path) -> None:
    home.mkdir(parents=True)
    (home / "config.toml").write_text('[sources.gh]\nid_hedaer = "X"\n')
    assert cli("config", "show").code == 2
    assert cli("config", "unset", "--all-users", "sources.gh.id_hedaer").code == 0
    assert written(home) == {}
    assert cli("config", "show").code == 0
