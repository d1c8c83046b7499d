"""What a handler may answer: every refusal names the place and the reason."""

from __future__ import annotations

import pytest

from agentbox.errors import BadInput
from agentbox.rules.answer import Answer, ApprovalRequest, FollowUp, Message, parse
from agentbox.rules.timers import TimerSpec

LONG_ID = "r" * 513
LONG_NAME = "n" * 201

REFUSED = [
    ("[]", "the answer must be a JSON object, not an array"),
    ('{"say":1,"messages":[]}', "the answer has unknown keys: say"),
    ("not json", "the answer is not valid JSON: Expecting value at line 1 column 1"),
    ('{"messages":"hi"}', "messages must be a list, not a string"),
    ('{"messages":["ok",1]}', "messages[1] must be a string or an object, not a number"),
    ('{"messages":["a\\u0000b"]}', "messages[0] contains a NUL character"),
    ('{"messages":[{"body":"x","urgent":1}]}', "messages[0].urgent must be true or false"),
    ('{"messages":[{"body":"x","loud":true,"big":1}]}', "messages[0] has unknown keys: big, loud"),
    ('{"messages":[{"urgent":true}]}', "messages[0].body must be a non-empty string, not null"),
    ('{"messages":[{"body":5}]}', "messages[0].body must be a non-empty string, not a number"),
    ('{"approvals":[1]}', "approvals[0] must be an object, not a number"),
    ('{"approvals":[{"id":"r","expires_in":"soon","action":"a"}]}',
     "approvals[0].expires_in must be a duration like 4h"),
    ('{"approvals":[{"id":"r","action":"a"}]}',
     "approvals[0].expires_in must be a duration like 4h"),
    ('{"approvals":[{"id":"r","expires_in":true,"action":"a"}]}',
     "approvals[0].expires_in must be a duration like 4h"),
    ('{"approvals":[{"id":"r","expires_in":"4h"}]}',
     "approvals[0].action must be a non-empty string, not null"),
    ('{"approvals":[{"expires_in":"4h","action":"a"}]}',
     "approvals[0].id must be a non-empty string, not null"),
    ('{"approvals":[{"id":"' + LONG_ID + '","expires_in":"4h","action":"a"}]}',
     "approvals[0].id: source_id is longer than 512 characters"),
    ('{"approvals":[{"id":"' + "r" * 194 + '","expires_in":"4h","action":"a"}]}',
     "approvals[0].id: an approval id is at most 193 characters: its expiry timer is named "
     "expire:ID, of at most 200"),
    ('{"approvals":[{"id":"r","expires_in":"4h","action":"a","x":1}]}',
     "approvals[0] has unknown keys: x"),
    ('{"approvals":"r"}', "approvals must be a list, not a string"),
    ('{"timers":[{"name":"t"}]}', "timers[0].in must be a duration like 15m"),
    ('{"timers":[{"name":"t","in":0}]}', "timers[0].in must be a duration like 15m"),
    ('{"timers":[{"name":"t","in":"15m","payload":[]}]}',
     "timers[0].payload must be a JSON object, not an array"),
    ('{"timers":[{"name":"t","in":"15m","payload":{"timer":1,"skipped":2}}]}',
     "timers[0]: a timer payload cannot use the key(s) skipped, timer: the scheduler sets "
     "them on every event"),
    ('{"timers":[{"name":"' + LONG_NAME + '","in":"15m"}]}',
     "timers[0]: a timer name is 1-200 characters without NUL"),
    ('{"timers":[{"name":"expire:r1","in":"15m"}]}',
     "timers[0]: timer names beginning 'expire:' are kept for approvals' expiries"),
    ('{"timers":[{"in":"15m"}]}', "timers[0].name must be a non-empty string, not null"),
    ('{"timers":[{"name":"t","in":"15m","every":1}]}', "timers[0] has unknown keys: every"),
    ('{"timers":"x"}', "timers must be a list, not a string"),
    ('{"timers":[7]}', "timers[0] must be an object, not a number"),
]


@pytest.mark.parametrize(("text", "why"), REFUSED, ids=[w for _, w in REFUSED])
def test_a_bad_answer_is_refused_whole_with_its_place_and_reason(text: str, why: str) -> None:
    with pytest.raises(BadInput) as refused:
        parse(text)
    assert str(refused.value) == why


@pytest.mark.parametrize("text", ['{"messages":[""]}', '{"messages":[{"body":""}]}',
                                  '{"approvals":[{"id":"","expires_in":"4h","action":"a"}]}'])
def test_an_empty_text_is_refused(text: str) -> None:
    with pytest.raises(BadInput, match=r"^(messages|approvals)\[0\](\.body|\.id)? must be a "
                                       r"non-empty string"):
        parse(text)


@pytest.mark.parametrize("text", ["", "   \n", b"", b" \t"])
def test_no_output_is_silence(text: str | bytes) -> None:
    assert parse(text) == Answer()


def test_a_whole_answer() -> None:
    answer = parse(b'{"messages":["hi",{"body":"down","urgent":true},{"body":"calm"}],'
                   b'"approvals":[{"id":"r-1","expires_in":"4h","action":"refund"}],'
                   b'"timers":[{"name":"t","in":"15m","payload":{"b":2,"a":1}},'
                   b'{"name":"u","in":90}]}')
    assert answer == Answer(
        messages=(Message("hi"), Message("down", True), Message("calm", False)),
        approvals=(ApprovalRequest("r-1", 14_400, "refund"),),
        timers=(FollowUp("t", 900, '{"a":1,"b":2}'), FollowUp("u", 90, "{}")))
    assert answer.messages[0].urgent is False


def test_a_follow_up_is_a_one_off_from_the_finish() -> None:
    assert FollowUp("t", 60, '{"a":1}').to_timer(1000) == TimerSpec(
        name="t", due=1060, every=None, payload='{"a":1}', follow_up=True)
