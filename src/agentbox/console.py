"""`agentbox console`: a browser console over every inbox of a location.

It runs on agentbox's HTTP server (:mod:`agentbox.httpserver`), as ``serve``
does, and every read and action is a :class:`~agentbox.ledger.store.Store`
call, the same as the CLI's: Replay is ``dead replay``, Resolve is
``outbox resolve``, Yes / No is ``approve answer``, a step's Resolve is ``steps
resolve`` (done with no output, or not done). Pages never count or read a whole
inbox: counts come from the kept tallies, events are paged by id (keyset: the
next page starts below the last id shown), each list is bounded (the steps page
shows the latest tries; the state page the kept versions, which
``keep_state_versions`` bounds).

Security: every value shown is escaped (:mod:`agentbox.pages`); every action
is a POST carrying the console's CSRF token and answered by a redirect; a
POST whose ``Origin`` names another site is refused. Without ``console_token``
the console listens on loopback only and answers only requests whose
``Host`` is a loopback name (a page of another site that rebinds its name to
127.0.0.1 gets nothing); with it, every page but the login form wants the
token, as ``Authorization: Bearer TOKEN`` or the HttpOnly cookie the login
form sets.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from agentbox import pages
from agentbox.errors import AgentboxError, BadInput, Busy, NotAsAsked
from agentbox.rules.records import EVENT_STATES
from agentbox.rules.steps import STEP_STATES
from agentbox.web import HTTPError, Request, Response

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from agentbox.ledger.inboxes import Inboxes
    from agentbox.ledger.store import Store

DEFAULT_LISTEN = "127.0.0.1:8788"
PAGE = 50  # events per page
LISTED = 100  # rows of each list on an inbox's page (dead, outbox, approvals)
COOKIE = "agentbox_console"
# What an action's redirect may say: fixed words, so a crafted link cannot make the
# console say anything else.
DONE = {"replayed": "Replayed event {}.", "resolved-sent": "Dispatch {} resolved as sent.",
        "resolved-unsent": "Dispatch {} resolved as unsent: its messages are held again.",
        "answered": "Approval {}: your answer stands.",
        "not-answered": "Approval {}: another outcome stands; your answer was not recorded.",
        "not-dead": "Event {} is not dead; nothing replayed.",
        "not-uncertain": "Dispatch {} is not uncertain; nothing resolved.",
        "step-done": "Step {} resolved as done: a later try runs nothing.",
        "step-not-done": "Step {} resolved as not done: a later try runs it.",
        "step-unchanged": "Step {} is not unsettled; nothing resolved."}
UNSETTLED = ("uncertain", "started")  # the steps an operator may resolve


def is_loopback(host: str) -> bool:
    """Whether a listen address or a Host name is this machine only."""
    name = host.strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class ConsoleApp:
    """The console's routes; called by the server's worker threads, each with its own
    view of the inboxes (so no connection is shared between threads)."""

    def __init__(self, open_inboxes: Callable[[], Inboxes], clock: Callable[[], int],
                 zone: ZoneInfo, token: str | None, log: Callable[[str], None]) -> None:
        self._open_inboxes = open_inboxes
        self._clock = clock
        self._zone = zone
        self._token = token
        self._log = log
        self._csrf = secrets.token_urlsafe(32)  # per process: a restart invalidates forms
        self._session = (None if token is None else
                         hmac.new(token.encode(), b"console session", hashlib.sha256)
                         .hexdigest())
        self._local = threading.local()
        self._opened: list[Inboxes] = []
        self._lock = threading.Lock()
        pages.warm()

    # -- plumbing ---------------------------------------------------------------

    def inboxes(self) -> Inboxes:
        found: Inboxes | None = getattr(self._local, "inboxes", None)
        if found is None:
            found = self._local.inboxes = self._open_inboxes()
            with self._lock:
                self._opened.append(found)
        return found

    def close(self) -> None:
        with self._lock:
            for inboxes in self._opened:
                inboxes.close()
            self._opened.clear()

    def __call__(self, request: Request) -> Response:
        if request.path == pages.STYLESHEET:
            _allow(request, "GET", "HEAD")
            return pages.stylesheet()
        refused = self._refusal(request)
        if refused is not None:
            return refused
        try:
            return self._route(request)
        except HTTPError as exc:
            return pages.page("message.html", {"heading": "Not done", "text": str(exc)},
                              exc.status, exc.headers)
        except Busy:
            return self._message(503, "Busy", "The inbox stayed busy; try again in a moment. "
                                 "Nothing was changed.")
        except AgentboxError as exc:
            self._log(f"console: {request.method} {request.path}: {exc}")
            return self._message(500, "Cannot read the inbox", str(exc))

    def _refusal(self, request: Request) -> Response | None:
        """Why this request gets no page (host, origin, login), or None."""
        host = request.headers.get("Host", "")
        if self._token is None and not is_loopback(urlsplit(f"//{host}").hostname or ""):
            return self._message(403, "Refused", "This console answers on loopback only.")
        origin = request.headers.get("Origin")
        # Under Referrer-Policy: no-referrer a browser sends "Origin: null" with its own
        # forms, so only a named other site is refused here; the CSRF token decides.
        if origin not in (None, "null") and request.method == "POST" \
                and urlsplit(origin).netloc.lower() != host.lower():
            return self._message(403, "Refused", "A form from another site was refused.")
        if self._token is None or self._authorised(request):
            return None
        if request.path == "/login":
            return self._login(request)
        return pages.page("login.html", {"error": None, "csrf": "", "nav": None}, 401)

    def _authorised(self, request: Request) -> bool:
        assert self._token is not None and self._session is not None
        given = request.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(),
                                                              self._token.encode()):
            return True
        cookie = request.cookies().get(COOKIE, "")
        return hmac.compare_digest(cookie.encode(), self._session.encode())

    def _login(self, request: Request) -> Response:
        assert self._token is not None and self._session is not None
        if request.method != "POST":
            return pages.page("login.html", {"error": None, "csrf": "", "nav": None}, 401)
        given = request.form().get("token", "")
        if not hmac.compare_digest(given.encode(), self._token.encode()):
            return pages.page("login.html", {"error": "That is not the console token.",
                                             "csrf": "", "nav": None}, 401)
        return pages.redirect("/", [("Set-Cookie", f"{COOKIE}={self._session}; HttpOnly; "
                                     "SameSite=Strict; Path=/")])

    def _message(self, status: int, heading: str, text: str) -> Response:
        return pages.page("message.html", {"heading": heading, "text": text}, status)

    def _page(self, template: str, context: Mapping[str, Any], status: int = 200) -> Response:
        return pages.page(template, {"csrf": self._csrf, "when": self._when, **context},
                          status)

    def _when(self, t: int | None) -> str:
        return pages.when(t, self._zone)

    def _store(self, user: str) -> Store:
        from agentbox.paths import check_user

        try:
            return self.inboxes().store(check_user(user))
        except (BadInput, AgentboxError):
            raise HTTPError(404, f"no inbox for user {user!r}") from None

    # -- routes -----------------------------------------------------------------

    def _route(self, request: Request) -> Response:
        parts = [unquote(p) for p in request.path.split("/")[1:]]
        if parts in ([""], ["login"]):
            _allow(request, "GET", "HEAD")
            return self._inbox_list() if parts == [""] else pages.redirect("/")
        if len(parts) < 2 or parts[0] != "i":
            return self._message(404, "Not found", "No such page.")
        user, rest = parts[1], parts[2:]
        if not rest:
            _allow(request, "GET", "HEAD")
            return self._inbox(user, request.query_args())
        if rest == ["events"]:
            _allow(request, "GET", "HEAD")
            return self._events(user, request.query_args())
        if len(rest) == 2 and rest[0] == "events" and rest[1].isdigit():
            _allow(request, "GET", "HEAD")
            return self._event(user, int(rest[1]))
        if rest == ["state"]:
            _allow(request, "GET", "HEAD")
            return self._state(user)
        if rest == ["steps"]:
            _allow(request, "GET", "HEAD")
            return self._steps(user, request.query_args())
        if len(rest) == 1 and rest[0] in ACTIONS:
            _allow(request, "POST")
            form = request.form()
            if not hmac.compare_digest(form.get("csrf", "").encode(), self._csrf.encode()):
                return self._message(403, "Refused", "This form is stale or came from "
                                     "elsewhere: reload the page and try again.")
            done, subject = ACTIONS[rest[0]](self, self._store(user), form)
            back = "/steps" if rest[0] == "resolve-step" else ""
            return pages.redirect(f"/i/{quote(user)}{back}?" + urlencode({"done": done,
                                                                         "of": subject}))
        return self._message(404, "Not found", "No such page.")

    def _inbox_list(self) -> Response:
        now = self._clock()
        rows: list[dict[str, Any]] = []
        inboxes = self.inboxes()
        for user in inboxes.users():
            try:
                vitals = inboxes.store(user).vitals()
            except AgentboxError as exc:
                rows.append({"user": user, "error": str(exc)})
                continue
            rows.append({"user": user, "error": None, "vitals": vitals,
                         "lease": _lease(vitals.status.lease, now)})
        return self._page("inboxes.html", {"rows": rows, "location": inboxes.location,
                                           "nav": None})

    def _inbox(self, user: str, args: Mapping[str, str]) -> Response:
        store = self._store(user)
        now = self._clock()
        vitals = store.vitals()
        return self._page("inbox.html", {
            "user": user, "nav": user, "vitals": vitals,
            "lease": _lease(vitals.status.lease, now), "said": _said(args),
            "state": store.state(),
            "dead": store.dead(LISTED),
            "outbox": store.outbox(limit=LISTED),
            "timers": store.timers()[:LISTED],
            "approvals": store.pending_approvals(now, LISTED)})

    def _events(self, user: str, args: Mapping[str, str]) -> Response:
        store = self._store(user)
        state = args.get("state") or None
        source = args.get("source") or None
        if state is not None and state not in EVENT_STATES:
            raise HTTPError(400, f"state is one of {', '.join(EVENT_STATES)}")
        before = _number(args.get("before"), "before")
        found = store.events((state,) if state else (), source=source, before=before,
                             limit=PAGE + 1)
        shown = list(reversed(found))[:PAGE]  # newest first
        older = None
        if len(found) > PAGE:
            query = {k: v for k, v in (("state", state), ("source", source)) if v}
            older = f"/i/{quote(user)}/events?" + urlencode({**query,
                                                            "before": shown[-1].id})
        return self._page("events.html", {
            "user": user, "nav": user, "events": shown, "state": state or "",
            "source": source or "", "states": EVENT_STATES, "older": older,
            "newest": before is not None})

    def _event(self, user: str, event_id: int) -> Response:
        store = self._store(user)
        event = store.event(event_id)
        if event is None:
            return self._message(404, "Not found", f"No event {event_id} in {user}'s inbox.")
        return self._page("event.html", {"user": user, "nav": user, "event": event,
                                         "payload": _pretty(event.payload),
                                         "story": store.story(event_id)})

    def _state(self, user: str) -> Response:
        store = self._store(user)
        kept = store.state_history()
        return self._page("state.html", {"user": user, "nav": user, "state": store.state(),
                                         "kept": [(v, _pretty(v.state)) for v in kept]})

    def _steps(self, user: str, args: Mapping[str, str]) -> Response:
        store = self._store(user)
        state = args.get("state") or None
        if state is not None and state not in STEP_STATES:
            raise HTTPError(400, f"state is one of {', '.join(STEP_STATES)}")
        found = store.steps(state, latest=LISTED + 1)
        return self._page("steps.html", {
            "user": user, "nav": user, "said": _said(args), "state": state or "",
            "states": STEP_STATES, "unsettled": UNSETTLED, "more": len(found) > LISTED,
            "steps": [(s, _output(s.output)) for s in reversed(found[-LISTED:])]})

    # -- actions: each one Store call, as the CLI makes it ------------------------

    def _replay(self, store: Store, form: Mapping[str, str]) -> tuple[str, str]:
        event_id = _number(form.get("id"), "id")
        if event_id is None:
            raise HTTPError(400, "which event: id is missing")
        replayed = store.replay([event_id], self._clock())
        return ("replayed" if replayed else "not-dead"), str(event_id)

    def _resolve(self, store: Store, form: Mapping[str, str]) -> tuple[str, str]:
        key, verdict = form.get("key", ""), form.get("verdict")
        if verdict not in ("sent", "unsent"):
            raise HTTPError(400, "verdict is sent or unsent")
        try:
            store.resolve_dispatch(key, verdict == "sent", self._clock())
        except NotAsAsked:
            return "not-uncertain", key
        except BadInput as exc:
            raise HTTPError(400, str(exc)) from None
        return f"resolved-{verdict}", key

    def _answer(self, store: Store, form: Mapping[str, str]) -> tuple[str, str]:
        approval_id, reply = form.get("id", ""), form.get("answer", "")
        try:
            standing = store.answer_approval(approval_id, reply, self._clock())
        except BadInput as exc:
            raise HTTPError(400, str(exc)) from None
        return ("answered" if standing == reply else "not-answered"), approval_id

    def _resolve_step(self, store: Store, form: Mapping[str, str]) -> tuple[str, str]:
        key, verdict = form.get("key", ""), form.get("verdict")
        if verdict not in ("done", "not-done"):
            raise HTTPError(400, "verdict is done or not-done")
        try:
            was = store.resolve_step(key, verdict == "done", b"", self._clock())
        except BadInput as exc:
            raise HTTPError(400, str(exc)) from None
        return (f"step-{verdict}" if was in UNSETTLED else "step-unchanged"), key


ACTIONS: dict[str, Callable[[ConsoleApp, Store, Mapping[str, str]], tuple[str, str]]] = {
    "replay": ConsoleApp._replay, "resolve": ConsoleApp._resolve,
    "answer": ConsoleApp._answer, "resolve-step": ConsoleApp._resolve_step}


def _said(args: Mapping[str, str]) -> str | None:
    """What the redirect after an action says: one of DONE's fixed sentences."""
    said = DONE.get(args.get("done", ""))
    return None if said is None else said.format(args.get("of", ""))


SHOWN_OUTPUT = 2000  # characters of a step's recorded stdout on the steps page


def _output(output: bytes | None) -> str | None:
    if output is None:
        return None
    text = output.decode("utf-8", "replace")
    return text if len(text) <= SHOWN_OUTPUT else text[:SHOWN_OUTPUT] + " …"


def _allow(request: Request, *methods: str) -> None:
    if request.method not in methods:
        raise HTTPError(405, f"{request.path} takes {' or '.join(methods)}",
                        [("Allow", ", ".join(methods))])


def _number(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise HTTPError(400, f"{name} is a whole number")
    return int(value)


def _lease(lease: Any, now: int) -> str:
    """The lease as a person reads it: who holds it, or free."""
    if lease is None or lease.released or lease.until <= now:
        return "free"
    return f"{lease.holder} (generation {lease.generation})"


def _pretty(payload: str) -> str:
    import json

    try:
        return json.dumps(json.loads(payload), indent=2, ensure_ascii=False)
    except ValueError:
        return payload
