"""The official `langgraph-sdk` against `agent serve`'s Agent Protocol routes.

Usage: langgraph_client.py BASE_URL KEY. Exits non-zero (with the failing assertion) on any
difference from what the SDK expects.
"""
import asyncio
import sys

from langgraph_sdk import get_client
from langgraph_sdk.errors import ConflictError


async def main(base: str, key: str) -> None:
    client = get_client(url=base, api_key=key)

    found = await client.assistants.search()
    names = {a["assistant_id"] for a in found}
    assert {"echo", "slow"} <= names, found
    schemas = await client.assistants.get_schemas("echo")
    assert schemas["input_schema"] and schemas["output_schema"], schemas

    # A stateless run, waited for.
    values = await client.runs.wait(None, "echo", input={"message": "hi"})
    assert values["output"] == "echo: hi (1 messages)", values

    # Streams in each mode.
    for mode in ["values", "updates", "messages-tuple", "events", "custom"]:
        seen = [part async for part in client.runs.stream(None, "echo", input="hello", stream_mode=mode)]
        events = [part.event for part in seen]
        assert events[0] == "metadata", (mode, events)
        wanted = {"messages-tuple": "messages"}.get(mode, mode)
        assert wanted in events, (mode, events)
        if mode == "values":
            assert seen[-1].data["output"] == "echo: hello (1 messages)", seen[-1]

    # A thread across two turns.
    thread = await client.threads.create()
    tid = thread["thread_id"]
    first = await client.runs.wait(tid, "echo", input={"message": "one"})
    assert first["output"] == "echo: one (1 messages)", first
    second = await client.runs.wait(tid, "echo", input={"message": "two"})
    assert second["output"] == "echo: two (3 messages)", second
    state = await client.threads.get_state(tid)
    assert state["values"]["output"] == "echo: two (3 messages)", state
    history = await client.threads.get_history(tid)
    assert len(history) == 2, history
    listed = await client.runs.list(tid)
    assert len(listed) == 2 and all(r["status"] == "success" for r in listed), listed

    # A background run, joined after it started; its stream joined too.
    run = await client.runs.create(tid, "slow", input={"message": "later"})
    assert run["status"] in ("pending", "running"), run
    # One run at a time on a thread: a second one is refused when it asks to be, else
    # queued (the server's default, as LangGraph's) and run after, seeing the turn before.
    try:
        await client.runs.create(tid, "echo", input="meanwhile", multitask_strategy="reject")
        raise AssertionError("a second run on a busy thread was accepted")
    except ConflictError:
        pass
    queued = await client.runs.create(tid, "echo", input="meanwhile")
    assert queued["status"] == "pending" and queued["multitask_strategy"] == "enqueue", queued
    parts = [p async for p in client.runs.join_stream(tid, run["run_id"], stream_mode="values")]
    assert any(p.event == "values" for p in parts), parts
    joined = await client.runs.join(tid, run["run_id"])
    assert joined["output"].startswith("echo: later"), joined
    done = await client.runs.get(tid, run["run_id"])
    assert done["status"] == "success", done
    after = await client.runs.join(tid, queued["run_id"])
    assert after["output"] == "echo: meanwhile (7 messages)", after

    # A background run cancelled.
    run = await client.runs.create(tid, "slow", input={"message": "never"})
    await client.runs.cancel(tid, run["run_id"], wait=True)
    cancelled = await client.runs.get(tid, run["run_id"])
    assert cancelled["status"] == "interrupted", cancelled

    # A run waiting for a tool approval, then resumed with the protocol's command.
    approval = await client.threads.create()
    aid = approval["thread_id"]
    waited = await client.runs.wait(aid, "approver", input="delete x")
    assert waited["__interrupt__"][0]["value"]["tool"] == "delete", waited
    state = await client.threads.get(aid)
    assert state["status"] == "interrupted", state
    resumed = await client.runs.wait(aid, "approver", command={"resume": "approve"})
    assert resumed["output"] == "approved: approve", resumed

    print("langgraph-sdk: an interrupted run resumed; assistants, runs.wait, runs.stream in five modes, threads over two turns, "
          "a joined background run, one run per thread (reject, enqueue), cancel: ok")


asyncio.run(main(sys.argv[1], sys.argv[2]))
