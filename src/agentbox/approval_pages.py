"""The pages of approval links, ``GET|POST /a/TOKEN`` on ``agentbox serve``.

A GET shows the action, the deadline in the user's zone and Yes / No (or the
outcome that stands) and never writes: a chat app's link preview fetches it
too. The POST answers through :meth:`Store.answer_approval`, the call behind
``approve answer``, so the deadline is checked in the answer's transaction
and the first answer stands. Anything the inbox did not sign with its
current secret is one 404 page, the same bytes whatever was wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import unquote

from agentbox import pages
from agentbox.errors import AgentboxError, BadInput, Busy
from agentbox.web import HTTPError, Request, Response

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from agentbox.groupcommit import GroupCommit
    from agentbox.ledger.store import Store
    from agentbox.rules.approvals import Approval

PREFIX = "/a/"
OUTCOMES = {"yes": "Yes", "no": "No", "expired": "Expired", "unknown": "Unknown"}
_GONE = ("Link not valid", "This approval link is not valid. It may have been replaced by a "
         "newer one; ask for a new link.")


def gone() -> Response:
    """The one answer to every token that leads nowhere: nothing tells which it was."""
    heading, text = _GONE
    return pages.page("message.html", {"heading": heading, "text": text}, 404)


class ApprovalPages:
    """Answers ``/a/TOKEN`` for one user's inbox."""

    def __init__(self, store: Callable[[], Store], user: str, zone: ZoneInfo,
                 clock: Callable[[], int], commit: GroupCommit,
                 log: Callable[[str], None], retry_after: int) -> None:
        self._store = store
        self._user = user
        self._zone = zone
        self._clock = clock
        self._commit = commit
        self._log = log
        self._retry_after = retry_after
        pages.warm()

    def __call__(self, request: Request) -> Response:
        link_token = unquote(request.path[len(PREFIX):])
        if request.method not in ("GET", "HEAD", "POST"):
            raise HTTPError(405, f"{PREFIX}TOKEN takes GET or POST",
                            [("Allow", "GET, HEAD, POST")])
        try:
            return self._answer(request, link_token)
        except Busy:
            self._log("an approval link waited too long for the database; answered 503")
            return pages.page("message.html", {
                "heading": "Busy", "text": "The agent's inbox is busy. Try again in a moment; "
                "nothing was recorded."}, 503, [("Retry-After", str(self._retry_after))])
        except BadInput:
            return gone()
        except AgentboxError as exc:
            self._log(f"cannot answer an approval link: {exc}")
            return pages.page("message.html", {
                "heading": "Not available", "text": "The agent's inbox cannot be read just "
                "now; nothing was recorded."}, 500)

    def _answer(self, request: Request, link_token: str) -> Response:
        store = self._store()
        now = self._clock()
        approval = store.approval_of_token(self._user, link_token, now)
        if approval is None:
            return gone()
        if request.method != "POST":
            return self._show(store, link_token, approval, None)
        form = request.form()
        if not store.check_link_csrf(link_token, form.get("csrf")):
            return pages.page("message.html", {
                "heading": "Not recorded", "text": "This form did not come from the approval "
                "page. Open the link again and answer there."}, 403)
        reply = form.get("answer")
        if reply not in ("yes", "no"):
            raise HTTPError(400, "answer is yes or no")
        standing = self._commit.run(store, lambda s: s.answer_approval(approval.id, reply, now))
        after = store.approval(approval.id, now) or approval
        said = (f"Your {OUTCOMES[reply]} is recorded." if standing == reply
                else f"Your {OUTCOMES[reply]} was not recorded: "
                + ("the deadline had passed." if standing == "expired"
                   else "an earlier answer stands."))
        return self._show(store, link_token, after, said)

    def _show(self, store: Store, link_token: str, approval: Approval,
              said: str | None) -> Response:
        pending = approval.outcome == "pending"
        return pages.page("link.html", {
            "approval": approval, "said": said, "outcomes": OUTCOMES,
            "csrf": store.link_csrf(link_token) if pending else "",
            "deadline": pages.when(approval.expires_at, self._zone),
            "requested": pages.when(approval.requested_at, self._zone),
            "answered": pages.when(approval.answered_at, self._zone)})
