// Drives the viewer in headless Chromium over the DevTools protocol, with real input events
// (a wheel turn, a drag, a double click over the timeline), and prints what the page says its
// visible range is after each, as one JSON object. No packages: Node's WebSocket client.
//
//   node --experimental-websocket drive.mjs CHROMIUM PAGE_URL PROFILE_DIR
import { spawn } from "node:child_process";

const [chromium, url, profile] = process.argv.slice(2);
const browser = spawn(chromium, [
  "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
  "--remote-debugging-port=0", `--user-data-dir=${profile}`, "--window-size=1400,900",
  "about:blank",
], { stdio: ["ignore", "ignore", "pipe"] });

const fail = (message) => {
  console.error(message);
  browser.kill("SIGKILL");
  process.exit(1);
};
setTimeout(() => fail("the page was not driven within 60 s"), 60_000).unref();

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
await new Promise((resolve, reject) => {
  socket.onopen = resolve;
  socket.onerror = () => reject(new Error("no DevTools connection"));
});
let next = 0;
const waiting = new Map();
socket.onmessage = (event) => {
  const message = JSON.parse(event.data);
  const call = waiting.get(message.id);
  if (!call) return;
  waiting.delete(message.id);
  if (message.error) call.reject(new Error(JSON.stringify(message.error)));
  else call.resolve(message.result);
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
  const { result } = await page("Runtime.evaluate", { expression, returnByValue: true });
  return result.value;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The first render.
for (let i = 0; (await evaluate("document.body && document.body.dataset.rendered")) !== "1"; i++) {
  if (i > 500) fail("the viewer never rendered");
  await sleep(20);
}
const range = () => evaluate(
  "[Number(document.getElementById('timeline').dataset.viewFrom), Number(document.getElementById('timeline').dataset.viewTo)]");
// A point over the run's lane track, a quarter of the way in.
const [x, y] = await evaluate(`(() => {
  const r = document.querySelector('.lane .lane-track').getBoundingClientRect();
  return [r.left + r.width / 4, r.top + r.height / 2];
})()`);
const mouse = (type, at, extra = {}) =>
  page("Input.dispatchMouseEvent", { type, x: at, y, button: "left", ...extra });
const settle = () => sleep(150);

const out = { before: await range() };
// The axis spans what the lane tracks span, so ticks sit over the times they name.
out.widths = await evaluate(`[document.getElementById('axis').getBoundingClientRect(),
  document.querySelector('.lane .lane-track').getBoundingClientRect()].map((r) => [r.left, r.width])`);
await mouse("mouseWheel", x, { button: "none", deltaX: 0, deltaY: -400 });
await settle();
out.zoomed = await range();
await mouse("mousePressed", x, { buttons: 1, clickCount: 1 });
for (let k = 1; k <= 10; k++) await mouse("mouseMoved", x + k * 20, { buttons: 1 });
await mouse("mouseReleased", x + 200, { clickCount: 1 });
await settle();
out.panned = await range();
out.hashAfterDrag = await evaluate("location.hash");
for (const clickCount of [1, 2]) {
  await mouse("mousePressed", x, { buttons: 1, clickCount });
  await mouse("mouseReleased", x, { clickCount });
}
await settle();
out.reset = await range();
console.log(JSON.stringify(out));
socket.close();
browser.kill("SIGKILL");
process.exit(0);
