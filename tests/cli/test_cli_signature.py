"""`ingest --signature SIG --secret-env VAR`: HMAC-SHA256 of the raw body, checked first."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from support.clock import T0
from support.fixtures import Cli
from support.store import users_at

SECRET = "It's a Secret to Everybody"
BODY = '{"action": "opened", "number": 1}'



def github(body: str | bytes, secret: str = SECRET) -> str:
    raw = body.encode() if isinstance(body, str) else body
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def stripe(body: str, stamp: int, secret: str = SECRET) -> str:
    digest = hmac.new(secret.encode(), f"{stamp}.{body}".encode(), hashlib.sha256).hexdigest()
    return f"t={stamp},v1={digest}"


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HOOK_SECRET", SECRET)
    return "HOOK_SECRET"


def signed(cli: Cli, signature: str, secret_env: str, body: str | bytes = BODY,
           now: int = T0, *extra: str) -> Any:
    return cli("ingest", "github", "delivery-1", "-f", "-", "--signature", signature,
               "--secret-env", secret_env, *extra, stdin=body, now=now)


def test_github_known_vector() -> None:
    # GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!"
    assert github("Hello, World!") == ("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c"
                                       "22c46f4379c8b043e17")


def test_github_signature_ok(cli: Cli, secret: str, rows: Any) -> None:
    result = signed(cli, github(BODY), secret)
    assert result.code == 0, result.err
    assert rows("SELECT payload FROM events") == [('{"action":"opened","number":1}',)]


def test_github_signature_is_over_the_raw_bytes(cli: Cli, secret: str, one_error: Any,
                                                place: str) -> None:
    # Same JSON, different bytes: the signature must not survive re-spacing.
    result = signed(cli, github(BODY), secret, body=BODY.replace(" ", ""))
    assert result.code == 77
    assert "does not match" in one_error(result.err)
    assert users_at(place) == []


@pytest.mark.parametrize("signature", [
    github(BODY, secret="wrong secret"),
    github(BODY)[:-1] + ("0" if github(BODY)[-1] != "0" else "1"),
    "sha256=",
    "sha256=not-hex-at-all",
    "sha1=" + "0" * 40,
    "garbage",
])
def test_github_mismatch_is_77_and_stores_nothing(cli: Cli, secret: str, home: Path,
                                                  one_error: Any, signature: str) -> None:
    result = signed(cli, signature, secret)
    assert result.code == 77
    one_error(result.err)
    assert result.out == ""
    assert not (home / "inboxes").exists()


def test_missing_secret_variable_is_a_usage_error(cli: Cli, home: Path, one_error: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_SECRET", raising=False)
    result = signed(cli, github(BODY), "NO_SUCH_SECRET")
    assert result.code == 2
    assert "NO_SUCH_SECRET" in one_error(result.err)
    assert not home.exists()


def test_empty_secret_is_a_usage_error(cli: Cli, home: Path, one_error: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMPTY_SECRET", "")
    result = signed(cli, github(BODY), "EMPTY_SECRET")
    assert result.code == 2
    assert "empty" in one_error(result.err)
    assert not (home / "inboxes").exists()


def test_signature_is_checked_before_the_body_is_parsed(cli: Cli, secret: str,
                                                        one_error: Any) -> None:
    # An unsigned bad body is a signature failure (77), not a JSON failure (65).
    assert signed(cli, github("{}"), secret, body="{not json").code == 77
    # A correctly signed bad body gets as far as the parser.
    result = signed(cli, github("{not json"), secret, body="{not json")
    assert result.code == 65
    assert "not valid JSON" in one_error(result.err)


def test_signature_with_payload_flag(cli: Cli, secret: str, one_error: Any, rows: Any,
                                     place: str) -> None:
    forged = cli("ingest", "gh", "p", "--payload", BODY, "--signature", github(BODY + " "),
                 "--secret-env", secret, now=T0)
    assert forged.code == 77
    assert "does not match" in one_error(forged.err)
    assert users_at(place) == []
    result = cli("ingest", "gh", "p", "--payload", BODY, "--signature", github(BODY),
                 "--secret-env", secret, now=T0)
    assert result.code == 0
    assert rows("SELECT source_id FROM events") == [("p",)]


def test_stripe_signature_ok_within_tolerance(cli: Cli, secret: str, rows: Any) -> None:
    assert signed(cli, stripe(BODY, T0 - 299), secret).code == 0
    assert rows("SELECT COUNT(*) FROM events") == [(1,)]


def test_stripe_signature_with_several_v1_and_a_v0(cli: Cli, secret: str) -> None:
    good = stripe(BODY, T0).split(",v1=")[1]
    header = f"t={T0},v1={'0' * 64},v0={'1' * 64},v1={good}"
    assert signed(cli, header, secret).code == 0


@pytest.mark.parametrize("stamp", [T0 - 301, T0 + 301, T0 - 86_400])
def test_stripe_stale_or_future_timestamp_is_77(cli: Cli, secret: str, home: Path,
                                                one_error: Any, stamp: int) -> None:
    result = signed(cli, stripe(BODY, stamp), secret)
    assert result.code == 77
    assert "timestamp" in one_error(result.err)
    assert not (home / "inboxes").exists()


@pytest.mark.parametrize("header", [
    stripe(BODY, T0, secret="wrong"),
    stripe(BODY + " ", T0),
    # signed for another moment than the one it claims
    f"t={T0 + 1}," + stripe(BODY, T0).split(",")[1],
    f"t=,v1={'0' * 64}",
    f"t=\uff11\uff12,v1={'0' * 64}",  # fullwidth digits
    f"v1={'0' * 64},t=abc",
])
def test_stripe_mismatch_is_77(cli: Cli, secret: str, home: Path, one_error: Any,
                               header: str) -> None:
    result = signed(cli, header, secret)
    assert result.code == 77
    one_error(result.err)
    assert not (home / "inboxes").exists()


def test_jsonl_stream_signature(cli: Cli, secret: str, rows: Any, place: str) -> None:
    stream = "\n".join(json.dumps({"source": "s", "source_id": str(i), "payload": {}})
                       for i in range(3)) + "\n"
    bad = cli("ingest", "--jsonl", "-", "--signature", github(stream + " "),
              "--secret-env", secret, stdin=stream, now=T0)
    assert bad.code == 77
    assert users_at(place) == []
    ok = cli("ingest", "--jsonl", "-", "--signature", github(stream), "--secret-env", secret,
             "--json", stdin=stream, now=T0)
    assert ok.code == 0
    assert json.loads(ok.out)["stored"] == 3
    assert rows("SELECT COUNT(*) FROM events") == [(3,)]
