// Drives `agent serve`'s chat page in headless Chromium over the DevTools protocol: picks
// the agent, types a message with real key events, sends it with Enter, waits for the turn
// to finish, and prints what the page shows as one JSON object (the streamed text seen while
// the run went, the answer, the tool calls, the cost line, and whether the trace opens).
//
//   node --experimental-websocket chat.mjs CHROMIUM PAGE_URL PROFILE_DIR AGENT MESSAGE
import { spawn } from "node:child_process";

const [chromium, url, profile, agent, message] = process.argv.slice(2);
const browser = spawn(chromium, [
  "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  "--remote-debugging-port=0", `--user-data-dir=${profile}`, "--window-size=1200,800",
  "about:blank",
], { stdio: ["ignore", "ignore", "pipe"] });
const fail = (text) => { console.error(text); browser.kill("SIGKILL"); process.exit(1); };
setTimeout(() => fail("the chat was not driven within 60 s"), 60_000).unref();
const endpoint = await new Promise((resolve) => {
  let text = "";
  browser.stderr.on("data", (chunk) => {
    text += chunk;
    const found = /DevTools listening on (ws:\/\/\S+)/.exec(text);
    if (found) resolve(found[1]);
  });
  browser.on("exit", () => fail(`chromium exited: ${text.slice(-500)}`));
});
const socket = new WebSocket(endpoint);
await new Promise((resolve, reject) => { socket.onopen = resolve; socket.onerror = () => reject(new Error("no DevTools")); });
let next = 0;
const waiting = new Map();
socket.onmessage = (event) => {
  const m = JSON.parse(event.data);
  const call = waiting.get(m.id);
  if (!call) return;
  waiting.delete(m.id);
  if (m.error) call.reject(new Error(JSON.stringify(m.error))); else call.resolve(m.result);
};
const send = (method, params = {}, sessionId) => new Promise((resolve, reject) => {
  const id = ++next;
  waiting.set(id, { resolve, reject });
  socket.send(JSON.stringify({ id, method, params, sessionId }));
});
const { targetId } = await send("Target.createTarget", { url });
const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
const page = (method, params) => send(method, params, sessionId);
const evaluate = async (expression) => {
  const { result, exceptionDetails } = await page("Runtime.evaluate", { expression, returnByValue: true, awaitPromise: true });
  if (exceptionDetails) fail(`the page threw: ${JSON.stringify(exceptionDetails).slice(0, 500)}`);
  return result.value;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

for (let i = 0; !(await evaluate(`document.querySelector('#agent option[value="${agent}"]') !== null`)); i++) {
  if (i > 300) fail("the agents were never listed");
  await sleep(20);
}
await evaluate(`(() => { const s = document.getElementById('agent'); s.value = ${JSON.stringify(agent)}; s.dispatchEvent(new Event('change')); })()`);
await evaluate("document.getElementById('message').focus()");
await page("Input.insertText", { text: message });
await page("Input.dispatchKeyEvent", { type: "keyDown", key: "Enter", code: "Enter", windowsVirtualKeyCode: 13 });
await page("Input.dispatchKeyEvent", { type: "keyUp", key: "Enter", code: "Enter", windowsVirtualKeyCode: 13 });

// While the run goes, the text grows; record what is seen before the turn is done.
const seen = [];
for (let i = 0; ; i++) {
  const state = await evaluate(`(() => {
    const turn = document.querySelector('.turn.agent');
    return turn ? { done: turn.dataset.done === '1', text: turn.querySelector('.text')?.textContent || '' } : null;
  })()`);
  if (state && state.text && seen[seen.length - 1] !== state.text) seen.push(state.text);
  if (state && state.done) break;
  if (i > 1500) fail("the turn never finished");
  await sleep(10);
}
const out = await evaluate(`(() => {
  const turn = document.querySelector('.turn.agent');
  return {
    user: document.querySelector('.turn.user')?.textContent,
    answer: turn.querySelector('.text').textContent,
    error: turn.classList.contains('error'),
    tools: [...turn.querySelectorAll('.tools details')].map((d) => ({
      name: d.querySelector('summary').textContent,
      args: d.querySelector('.args')?.textContent,
      result: d.querySelector('.result')?.textContent,
    })),
    cost: turn.querySelector('.cost')?.textContent,
    trace: !!turn.querySelector('.meta a.trace'),
  };
})()`);
out.seen = seen;
console.log(JSON.stringify(out));
browser.kill("SIGKILL");
process.exit(0);
