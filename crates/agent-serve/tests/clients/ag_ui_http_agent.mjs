// @ag-ui/client's HttpAgent (npm) runs agents through `/ag-ui/{agent}`: its verifier checks
// the events' order, its default apply keeps messages and state. Usage:
// node ag_ui_http_agent.mjs CLIENT_ENTRY BASE_URL KEY
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";

const [entry, base, key] = process.argv.slice(2);
const { HttpAgent } = await import(pathToFileURL(entry).href);
const headers = { Authorization: `Bearer ${key}` };

// A tool call and the answer; messages and state as the client applies them.
const agent = new HttpAgent({
  url: `${base}/ag-ui/tooler`,
  headers,
  threadId: "t-http-agent",
  initialMessages: [{ id: "u1", role: "user", content: "the moon" }],
});
const types = [];
const first = await agent.runAgent({ runId: "r1" }, { onEvent: ({ event }) => { types.push(event.type); } });
assert.equal(first.result, "found: the moon is known");
for (const t of ["RUN_STARTED", "TOOL_CALL_START", "TOOL_CALL_RESULT", "TEXT_MESSAGE_START", "STATE_DELTA", "RUN_FINISHED"]) {
  assert.ok(types.includes(t), `${t} in ${types}`);
}
const called = agent.messages.find((m) => m.role === "assistant" && m.toolCalls?.length);
assert.equal(called.toolCalls[0].function.name, "lookup");
assert.deepEqual(JSON.parse(called.toolCalls[0].function.arguments), { q: "the moon" });
const tool = agent.messages.find((m) => m.role === "tool");
assert.equal(tool.content, "the moon is known");
const answer = agent.messages.findLast((m) => m.role === "assistant" && m.content);
assert.equal(answer.content, "found: the moon is known");
assert.equal(agent.state.status, "success");
assert.equal(agent.state.spent.calls, 1);

// A second turn on the same thread.
agent.addMessage({ id: "u2", role: "user", content: "the sun" });
const second = await agent.runAgent({ runId: "r2" });
assert.equal(second.result, "found: the sun is known");

// An approval: the run ends with an interrupt, a resume goes on.
const approver = new HttpAgent({
  url: `${base}/ag-ui/approver`,
  headers,
  threadId: "t-http-approve",
  initialMessages: [{ id: "u1", role: "user", content: "delete x" }],
});
let outcome;
await approver.runAgent({ runId: "r3" }, {
  onRunFinishedEvent: ({ event }) => { outcome = event.outcome; },
});
assert.equal(outcome?.type, "interrupt", JSON.stringify(outcome));
assert.equal(outcome.interrupts[0].id, "call_1");
const resumed = await approver.runAgent({
  runId: "r4",
  resume: [{ interruptId: "call_1", status: "resolved", payload: true }],
});
assert.equal(resumed.result, "approved: approve");

console.log("@ag-ui/client HttpAgent: a tool call, messages and state applied, two turns, an interrupt resumed: ok");
