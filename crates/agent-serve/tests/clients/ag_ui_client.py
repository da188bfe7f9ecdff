"""AG-UI's own Python models (PyPI `ag-ui-protocol`) against `/ag-ui/{agent}`: every event
the endpoint sends must parse as one of the package's events, with no field it does not
know, in the order the protocol's client checks; a tool call, a second turn on the thread,
an approval as an interrupt answered with `resume`, and refused requests."""

import json
import sys

import httpx
from ag_ui.core import Event, RunAgentInput, UserMessage, AssistantMessage
from pydantic import TypeAdapter

EVENT = TypeAdapter(Event)


def run(base, key, agent, body):
    """POSTs a RunAgentInput; the parsed events."""
    events = []
    with httpx.stream(
        "POST",
        f"{base}/ag-ui/{agent}",
        content=body,
        headers={
            "authorization": f"Bearer {key}",
            "content-type": "application/json",
            "accept": "text/event-stream",
        },
        timeout=30,
    ) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                event = EVENT.validate_json(line[len("data: "):])
                assert not event.model_extra, f"fields the models do not know: {event.model_extra}"
                events.append(event)
            else:
                assert line == "" or line.startswith((":", "id:")), line
    check_order(events)
    return events


def check_order(events):
    """What @ag-ui/client's verifier enforces."""
    types = [e.type.value for e in events]
    assert types[0] == "RUN_STARTED", types
    assert events[0].protocol_version == "1.0", events[0]
    assert types[-1] in ("RUN_FINISHED", "RUN_ERROR"), types
    assert types.count("RUN_STARTED") == 1 and types.count(types[-1]) == 1, types
    open_messages, open_calls = set(), set()
    for e in events:
        t = e.type.value
        if t == "TEXT_MESSAGE_START":
            assert e.message_id not in open_messages
            open_messages.add(e.message_id)
        elif t in ("TEXT_MESSAGE_CONTENT",):
            assert e.message_id in open_messages, e
        elif t == "TEXT_MESSAGE_END":
            open_messages.remove(e.message_id)
        elif t == "TOOL_CALL_START":
            open_calls.add(e.tool_call_id)
        elif t == "TOOL_CALL_ARGS":
            assert e.tool_call_id in open_calls, e
        elif t == "TOOL_CALL_END":
            open_calls.remove(e.tool_call_id)
        elif t == "RUN_FINISHED":
            assert not open_messages and not open_calls, (open_messages, open_calls)


def apply_patch(state, ops):
    """The `replace` operations of a JSON Patch (what the endpoint sends)."""
    for op in ops:
        # The models type each operation (ReplaceOperation, ...).
        op = op if isinstance(op, dict) else op.model_dump(by_alias=True, mode="json")
        assert op["op"] == "replace", op
        target = state
        parts = op["path"].lstrip("/").split("/")
        for part in parts[:-1]:
            target = target[part]
        assert parts[-1] in target, op
        target[parts[-1]] = op["value"]


def body(thread, run_id, messages=(), resume=None):
    data = RunAgentInput(
        thread_id=thread, run_id=run_id, state={}, messages=list(messages), tools=[],
        context=[], forwarded_props={},
    ).model_dump(by_alias=True, exclude_none=True, mode="json")
    if resume is not None:
        data["resume"] = resume
    return json.dumps(data)


def main(base, key):
    # A tool call, then the answer, with the state's spend kept up to date.
    hello = UserMessage(id="u1", role="user", content="the moon")
    events = run(base, key, "tooler", body("t-agui", "r1", [hello]))
    types = [e.type.value for e in events]
    for needed in ["STATE_SNAPSHOT", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END",
                   "TOOL_CALL_RESULT", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT",
                   "TEXT_MESSAGE_END", "STATE_DELTA"]:
        assert needed in types, (needed, types)
    start = next(e for e in events if e.type.value == "TOOL_CALL_START")
    assert start.tool_call_name == "lookup", start
    args = "".join(e.delta for e in events if e.type.value == "TOOL_CALL_ARGS")
    assert json.loads(args) == {"q": "the moon"}, args
    result = next(e for e in events if e.type.value == "TOOL_CALL_RESULT")
    assert result.tool_call_id == start.tool_call_id and result.content == "the moon is known", result
    text = "".join(e.delta for e in events if e.type.value == "TEXT_MESSAGE_CONTENT")
    assert text == "found: the moon is known", text
    state = next(e for e in events if e.type.value == "STATE_SNAPSHOT").snapshot
    for e in events:
        if e.type.value == "STATE_DELTA":
            apply_patch(state, e.delta)
    assert state["status"] == "success" and state["spent"]["calls"] == 1, state
    assert state["spent"]["input_tokens"] == 20, state
    finished = events[-1]
    assert finished.type.value == "RUN_FINISHED" and finished.run_id == "r1", finished
    assert finished.result == "found: the moon is known", finished
    assert finished.outcome.type == "success", finished.outcome

    # A second turn on the thread: the thread keeps the first.
    again = UserMessage(id="u2", role="user", content="hi")
    said = AssistantMessage(id="a1", role="assistant", content=text)
    events = run(base, key, "echo", body("t-agui-echo", "r2", [hello, said, again]))
    assert events[-1].result == "echo: hi (3 messages)", events[-1]
    events = run(base, key, "echo", body("t-agui-echo", "r3", [hello, said, again, said, again]))
    assert events[-1].result == "echo: hi (5 messages)", events[-1]

    # An approval: the run finishes its stream with an interrupt, and a resume goes on.
    delete = UserMessage(id="u3", role="user", content="delete x")
    events = run(base, key, "approver", body("t-agui-approve", "r4", [delete]))
    outcome = events[-1].outcome
    assert outcome.type == "interrupt", outcome
    interrupt = outcome.interrupts[0]
    assert interrupt.id == "call_1" and interrupt.tool_call_id == "call_1", interrupt
    wrong = httpx.post(f"{base}/ag-ui/approver", content=body("t-agui-approve", "r5", [], [
        {"interruptId": "call_9", "status": "resolved"}]),
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"})
    assert wrong.status_code == 409, wrong.text
    events = run(base, key, "approver", body("t-agui-approve", "r6", [], [
        {"interruptId": "call_1", "status": "resolved", "payload": True}]))
    assert events[-1].result == "approved: approve", events[-1]

    # Refused: an unknown agent, a conversation that does not end with the user, no key.
    for agent, payload, status, headers in [
        ("nobody", body("t-x", "r7", [hello]), 404, {"authorization": f"Bearer {key}"}),
        ("echo", body("t-x", "r8", [said]), 422, {"authorization": f"Bearer {key}"}),
        ("echo", body("t-x", "r9", [hello]), 401, {}),
        ("echo", "{\"threadId\": 3}", 422, {"authorization": f"Bearer {key}"}),
    ]:
        response = httpx.post(f"{base}/ag-ui/{agent}", content=payload,
                              headers={**headers, "content-type": "application/json"})
        assert response.status_code == status, (agent, response.status_code, response.text)
        assert "error" in response.json(), response.text

    print("ag-ui-protocol 1.0.0: every event parsed by its models, in order; a tool call, "
          "state deltas, two turns, an interrupt resumed, refusals: ok")


main(sys.argv[1], sys.argv[2])
