"""Approval links: signed tokens, CSRF tokens bound to them, and ``{approval:ID}``.

A link is ``PUBLIC_URL/a/TOKEN``. TOKEN carries the user, the approval id
and its deadline in the clear (base64url of a JSON list) and an HMAC-SHA256
over exactly those bytes with the inbox's link secret, so the server finds
the approval without a lookup table and refuses anything it did not sign:
a changed byte, another inbox's token (another secret), or one signed with
a secret since rotated. Pure: no database, no clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Collection, Iterable

from agentbox.errors import BadInput

SECRET_BYTES = 32
MAX_TOKEN = 2048  # characters: a token over it was never made here
PLACEHOLDER = re.compile(r"\{approval:([^{}\s]+)\}")
_TOKEN = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(secret: bytes, purpose: bytes, data: bytes) -> bytes:
    return hmac.new(secret, purpose + b"\x00" + data, hashlib.sha256).digest()


def token(secret: bytes, user: str, approval_id: str, deadline: int) -> str:
    """The link token of one approval of ``user``'s inbox."""
    claims = json.dumps([user, approval_id, deadline], ensure_ascii=False,
                        separators=(",", ":")).encode("utf-8")
    return f"{_b64(claims)}.{_b64(_mac(secret, b'link', claims))}"


def claims(text: str) -> tuple[str, str, int] | None:
    """What a token says (user, approval id, deadline), unverified; None if it is no token.

    Read before the signature is checked only to find whose secret checks it;
    nothing it says is trusted until :func:`verify` agrees.
    """
    if len(text) > MAX_TOKEN or not _TOKEN.fullmatch(text):
        return None
    try:
        found = json.loads(_unb64(text.partition(".")[0]).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if (not isinstance(found, list) or len(found) != 3
            or not all(isinstance(v, str) for v in found[:2])
            or type(found[2]) is not int):
        return None
    return found[0], found[1], found[2]


def verify(secret: bytes, text: str) -> bool:
    """Whether ``secret`` signed the token ``text`` (compared in constant time)."""
    if claims(text) is None:
        return False
    encoded, _, mac = text.partition(".")
    return hmac.compare_digest(_b64(_mac(secret, b"link", _unb64(encoded))), mac)


def csrf(secret: bytes, link_token: str) -> str:
    """The form token of a link's page: only a page served for this token carries it."""
    return _b64(_mac(secret, b"csrf", link_token.encode("ascii")))


def check_csrf(secret: bytes, link_token: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(csrf(secret, link_token), given)


def url(public_url: str, link_token: str) -> str:
    return f"{public_url.rstrip('/')}/a/{link_token}"


def check_public_url(value: str) -> str:
    """``public_url``: where people reach ``serve``, an http(s) URL without query or
    fragment (a link is it plus ``/a/TOKEN``)."""
    from urllib.parse import urlsplit

    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query \
            or parts.fragment or any(c.isspace() for c in value):
        raise BadInput(f"public_url must be an http:// or https:// URL without query or "
                       f"fragment, not {value!r}")
    return value


def placeholder_ids(body: str) -> list[str]:
    """The approval ids ``{approval:ID}`` names in a message body, in order."""
    return PLACEHOLDER.findall(body)


def check_placeholders(bodies: Iterable[str], requested: Collection[str],
                       pending: Callable[[Collection[str]], Collection[str]]) -> None:
    """Refuse an answer whose messages link an approval that is neither requested in
    the same answer nor pending: the link would lead nowhere, or to an outcome
    already settled. ``pending`` answers for the ids not requested here."""
    named = {i for body in bodies for i in placeholder_ids(body)}
    others = named - set(requested)
    if not others:
        return
    missing = sorted(others - set(pending(others)))
    if missing:
        raise BadInput("a message links approval(s) neither requested in this answer nor "
                       f"pending: {', '.join(missing)}")


def without_link(approval_id: str) -> str:
    """What stands for ``{approval:ID}`` where no ``public_url`` is set."""
    return f"`agentbox approve answer {approval_id} yes|no`"


def substitute(body: str, link_of: Callable[[str], str | None]) -> str:
    """``body`` with each ``{approval:ID}`` replaced by ``link_of(ID)``; one whose
    approval is gone (pruned) is left as written."""
    def one(match: re.Match[str]) -> str:
        found = link_of(match.group(1))
        return match.group(0) if found is None else found

    return PLACEHOLDER.sub(one, body)
