// Drives target/release/mia-acp with the official ACP TypeScript SDK as the
// client (0.17.x: ClientSideConnection; 2.x: client() app), against the
// scenario server as the model provider.
//
//   node tests/acp/mia_acp_client.mjs SDK_DIR MIA_ACP CONFIG PROJECT_A PROJECT_B
//
// Prints "ok <step>" per step and "ALL OK" at the end; the first failed
// check prints "FAIL <what>" (with what was seen) and exits 1.

import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [sdkDir, bin, configFile, projA, projB] = process.argv.slice(2);
const pkg = JSON.parse(fs.readFileSync(path.join(sdkDir, "package.json"), "utf8"));
const entry = pkg.exports?.["."]?.import ?? pkg.main;
const sdk = await import(pathToFileURL(path.join(sdkDir, entry)).href);
const flavour = typeof sdk.ClientSideConnection === "function" ? "ClientSideConnection" : "client()";

function fail(what, seen) {
  console.log(`FAIL ${what}${seen === undefined ? "" : ": " + JSON.stringify(seen).slice(0, 2000)}`);
  process.exit(1);
}
function check(cond, what, seen) {
  if (!cond) fail(what, seen);
}
function ok(step) {
  console.log(`ok ${step}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits until `pred()` holds (bounded: a missing update fails the run, never hangs it). */
async function until(pred, what, seen) {
  for (let i = 0; i < 1500; i++) {
    const v = pred();
    if (v) return v;
    await sleep(10);
  }
  fail(`timed out waiting for ${what}`, seen?.());
}

/** One mia-acp process and the client state the test checks. */
async function start() {
  const proc = spawn(bin, ["--config", configFile], { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d) => (stderr += d));
  const exited = new Promise((r) => proc.on("exit", (code) => r(code)));
  const st = {
    proc,
    exited,
    stderr: () => stderr,
    updates: [], // every session/update notification's params
    permissions: [], // every session/request_permission's params
    reads: [],
    writes: [],
    answer: (req) => ({ outcome: { outcome: "selected", optionId: req.options[0].optionId } }),
  };
  const handlers = {
    requestPermission: async (params) => {
      st.permissions.push(params);
      return st.answer(params);
    },
    sessionUpdate: async (params) => {
      st.updates.push(params);
    },
    readTextFile: async (params) => {
      st.reads.push(params.path);
      // Unlike an editor buffer, a file that does not exist is an error.
      return { content: fs.readFileSync(params.path, "utf8") };
    },
    writeTextFile: async (params) => {
      st.writes.push(params.path);
      fs.writeFileSync(params.path, params.content);
      return {};
    },
  };
  const stream = sdk.ndJsonStream(Writable.toWeb(proc.stdin), Readable.toWeb(proc.stdout));
  if (flavour === "ClientSideConnection") {
    const conn = new sdk.ClientSideConnection(() => handlers, stream);
    st.call = (method, params) => {
      const m = {
        initialize: "initialize",
        "session/new": "newSession",
        "session/load": "loadSession",
        "session/list": "listSessions",
        "session/set_mode": "setSessionMode",
        "session/prompt": "prompt",
        "session/cancel": "cancel",
      }[method];
      return conn[m](params);
    };
  } else {
    const app = sdk
      .client({ name: "mia-acp-test" })
      .onRequest("session/request_permission", ({ params }) => handlers.requestPermission(params))
      .onRequest("fs/read_text_file", ({ params }) => handlers.readTextFile(params))
      .onRequest("fs/write_text_file", ({ params }) => handlers.writeTextFile(params))
      .onNotification("session/update", ({ params }) => handlers.sessionUpdate(params));
    const conn = app.connect(stream);
    st.call = (method, params) =>
      method === "session/cancel" ? conn.agent.notify(method, params) : conn.agent.request(method, params);
  }
  return st;
}

const of = (st, sid, kind) => st.updates.filter((u) => u.sessionId === sid && u.update.sessionUpdate === kind).map((u) => u.update);
const text = (st, sid) =>
  of(st, sid, "agent_message_chunk")
    .map((u) => u.content?.text ?? "")
    .join("");

async function initialize(st) {
  const init = await st.call("initialize", {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true } },
    clientInfo: { name: "mia-acp-test", version: "0" },
  });
  check(init.protocolVersion === 1, "initialize answers protocol version 1", init);
  check(init.agentInfo?.name === "mia-acp", "agentInfo names mia-acp", init);
  check(init.agentCapabilities?.loadSession === true, "loadSession capability", init);
  check(init.agentCapabilities?.sessionCapabilities?.list !== undefined, "session list capability", init);
  return init;
}

async function newSession(st, cwd) {
  const s = await st.call("session/new", { cwd, mcpServers: [] });
  check(typeof s.sessionId === "string" && s.sessionId.length > 0, "session/new gives an id", s);
  return s;
}

async function prompt(st, sid, textIn) {
  return st.call("session/prompt", { sessionId: sid, prompt: [{ type: "text", text: textIn }] });
}

// --- first process: new, prompt with a tool call and a permission, set_mode, cancel, list
const a = await start();
await initialize(a);
ok(`initialize (${flavour})`);

const s1 = await newSession(a, projA);
const modeIds = (s1.modes?.availableModes ?? []).map((m) => m.id);
check(s1.modes?.currentModeId === "ask", "a new session starts in ask mode", s1.modes);
check(["ask", "architect", "code"].every((m) => modeIds.includes(m)), "modes ask, architect, code", s1.modes);
const cmds = await until(() => of(a, s1.sessionId, "available_commands_update").at(-1), "available_commands_update after session/new");
const names = cmds.availableCommands.map((c) => c.name);
check(names.includes("costs") && names.includes("mode"), "slash commands offered", names);
check(!names.includes("compact"), "compact only once there is something to compact", names);
ok("session/new with modes and available_commands_update");

const target = path.join(projA, "hello.txt");
const r1 = await prompt(a, s1.sessionId, `tool write_file {"path":"hello.txt","content":"hi from mia\\n"}`);
check(r1.stopReason === "end_turn", "the tool turn ends with end_turn", r1);
check(a.permissions.length === 1, "one permission request", a.permissions);
const perm = a.permissions[0];
check(perm.sessionId === s1.sessionId, "the permission names the session", perm);
check(perm.options.some((o) => o.optionId === "allow_once" && o.kind === "allow_once"), "allow_once offered", perm.options);
check(perm.options.some((o) => o.kind === "reject_once"), "reject offered", perm.options);
check(fs.readFileSync(target, "utf8") === "hi from mia\n", "the file changed", fs.existsSync(target) && fs.readFileSync(target, "utf8"));
check(a.writes.includes(target), "the write went through the client's fs/write_text_file", a.writes);
// The updates precede the answer on the wire, but the SDK may resolve the
// answer before its update handler ran: wait for the last ones (bounded).
await until(() => text(a, s1.sessionId).includes("tool said:"), "the model got the tool's result", () => text(a, s1.sessionId));
await until(() => of(a, s1.sessionId, "usage_update").length >= 2, "a usage_update per model call", () => of(a, s1.sessionId, "usage_update"));
const calls = of(a, s1.sessionId, "tool_call");
check(calls.some((c) => c.title === "write_file" || c.rawInput?.path === "hello.txt"), "a tool_call update for write_file", calls);
const done = of(a, s1.sessionId, "tool_call_update").filter((u) => u.status === "completed");
check(done.length >= 1, "the tool call completed", of(a, s1.sessionId, "tool_call_update"));
const usage = of(a, s1.sessionId, "usage_update");
check(usage.length >= 2, "a usage_update per model call", usage);
check(usage.at(-1).cost?.currency === "USD" && usage.at(-1).cost.amount > 0, "usage_update carries the session's cost", usage.at(-1));
check(usage.at(-1).used > 0 && usage.at(-1).size >= 0, "usage_update carries token counts", usage.at(-1));
ok("prompt with a tool call, a permission request, the file written, usage_update with cost");

const after = await until(
  () => of(a, s1.sessionId, "available_commands_update").at(-1)?.availableCommands.some((c) => c.name === "compact") && true,
  "compact offered once the session has messages",
  () => of(a, s1.sessionId, "available_commands_update"),
);
check(after, "compact offered");

// A rejected permission: the tool does not run, the file stays.
a.answer = (req) => ({ outcome: { outcome: "selected", optionId: req.options.find((o) => o.kind === "reject_once").optionId } });
const r2 = await prompt(a, s1.sessionId, `tool write_file {"path":"hello.txt","content":"overwritten\\n"}`);
check(r2.stopReason === "end_turn", "the rejected turn ends", r2);
check(a.permissions.length === 2, "a second permission request", a.permissions.length);
check(fs.readFileSync(target, "utf8") === "hi from mia\n", "a rejected write leaves the file", fs.readFileSync(target, "utf8"));
a.answer = (req) => ({ outcome: { outcome: "selected", optionId: req.options[0].optionId } });
ok("a rejected permission leaves the file");

await a.call("session/set_mode", { sessionId: s1.sessionId, modeId: "code" });
await until(
  () => of(a, s1.sessionId, "current_mode_update").some((u) => u.currentModeId === "code"),
  "current_mode_update to code",
  () => a.updates.slice(-5),
);
let badMode = null;
try {
  await a.call("session/set_mode", { sessionId: s1.sessionId, modeId: "yolo" });
} catch (e) {
  badMode = e;
}
check(badMode !== null, "an unknown mode is refused");
ok("set_mode with current_mode_update");

const costs = await prompt(a, s1.sessionId, "/costs");
check(costs.stopReason === "end_turn", "/costs ends", costs);
// As above: the answer may overtake its updates in the SDK.
await until(() => /This session has cost \$\d/.test(text(a, s1.sessionId)), "/costs answers the session's cost", () => text(a, s1.sessionId).slice(-200));
ok("slash command /costs");

// Cancel: a stalled answer, cancelled once its first token arrived.
const before = text(a, s1.sessionId).length;
const stalled = prompt(a, s1.sessionId, "stall 2");
await until(() => text(a, s1.sessionId).slice(before).includes("w00001"), "the stalled answer's tokens");
await a.call("session/cancel", { sessionId: s1.sessionId });
const r3 = await stalled;
check(r3.stopReason === "cancelled", "a cancelled prompt ends with stopReason cancelled", r3);
const r4 = await prompt(a, s1.sessionId, "echo still here");
check(r4.stopReason === "end_turn", "the session answers after a cancel", r4);
await until(() => text(a, s1.sessionId).endsWith("still here"), "the answer after a cancel", () => text(a, s1.sessionId).slice(-100));
ok("cancel");

// List: page size 2 (config acp.list_page_size), three sessions in A, one in B.
const ids = [s1.sessionId];
for (const [cwd, words] of [
  [projA, "echo two"],
  [projA, "echo three"],
  [projB, "echo four"],
]) {
  const s = await newSession(a, cwd);
  const r = await prompt(a, s.sessionId, words);
  check(r.stopReason === "end_turn", "prompt in a new session", r);
  ids.push(s.sessionId);
}
const page1 = await a.call("session/list", { cwd: projA });
check(page1.sessions.length === 2, "the first page holds list_page_size sessions", page1);
check(typeof page1.nextCursor === "string", "a cursor to the next page", page1);
const page2 = await a.call("session/list", { cwd: projA, cursor: page1.nextCursor });
check(page2.sessions.length === 1 && !page2.nextCursor, "the last page", page2);
const listed = [...page1.sessions, ...page2.sessions];
check(listed.every((s) => s.cwd === projA), "the cwd filter holds", listed);
check(new Set(listed.map((s) => s.sessionId)).size === 3, "no session twice across pages", listed);
check(ids.slice(0, 3).every((id) => listed.some((s) => s.sessionId === id)), "every session of A listed", listed);
check(!listed.some((s) => s.sessionId === ids[3]), "B's session not in A's list", listed);
check(listed.every((s) => typeof s.updatedAt === "string"), "updatedAt on every session", listed);
const inB = await a.call("session/list", { cwd: projB });
check(inB.sessions.length === 1 && inB.sessions[0].sessionId === ids[3], "B lists its own session", inB);
let badCursor = null;
try {
  await a.call("session/list", { cwd: projA, cursor: "not-a-cursor" });
} catch (e) {
  badCursor = e;
}
check(badCursor !== null, "a forged cursor is refused");
ok("session/list with cwd filter and cursor");

a.proc.stdin.end();
const code = await Promise.race([a.exited, sleep(10000).then(() => "still running")]);
check(code === 0, "mia-acp exits 0 when the client closes stdin", { code, stderr: a.stderr() });
ok("exit on end of input");

// --- second process: load replays the stored session; architect -> code
const b = await start();
await initialize(b);
const loaded = await b.call("session/load", { sessionId: s1.sessionId, cwd: projA, mcpServers: [] });
const replay = b.updates.filter((u) => u.sessionId === s1.sessionId).map((u) => u.update);
const kinds = replay.map((u) => u.sessionUpdate);
check(kinds.includes("user_message_chunk"), "the load replays the user's prompts", kinds);
const userText = replay.filter((u) => u.sessionUpdate === "user_message_chunk").map((u) => u.content.text);
check(userText[0]?.startsWith("tool write_file"), "the first prompt first", userText);
check(kinds.includes("tool_call") && kinds.includes("tool_call_update"), "the load replays the tool call", kinds);
check(
  replay.some((u) => u.sessionUpdate === "agent_message_chunk" && u.content.text.includes("tool said:")),
  "the load replays the answers",
  kinds,
);
check(loaded.modes?.currentModeId === "code", "the loaded session keeps its mode", loaded.modes);
await until(
  () => of(b, s1.sessionId, "available_commands_update").at(-1)?.availableCommands.some((c) => c.name === "compact"),
  "available_commands_update after load",
);
ok("session/load replays the updates");

const again = await prompt(b, s1.sessionId, "echo after load");
check(again.stopReason === "end_turn", "a loaded session takes prompts", again);
ok("prompt after load");

// Architect -> code: the plan as a permission request with three options.
const arch = await newSession(b, projA);
await b.call("session/set_mode", { sessionId: arch.sessionId, modeId: "architect" });
const permsBefore = b.permissions.length;
b.answer = (req) => ({ outcome: { outcome: "selected", optionId: req.options.find((o) => o.kind === "allow_always").optionId } });
const r5 = await prompt(b, arch.sessionId, `tool switch_mode {"plan":"1. write the code"}`);
check(r5.stopReason === "end_turn", "the architect turn ends", r5);
const sw = b.permissions.slice(permsBefore);
check(sw.length === 1, "one switch question", sw);
const kindsOffered = sw[0].options.map((o) => o.kind).sort();
check(JSON.stringify(kindsOffered) === JSON.stringify(["allow_always", "allow_once", "reject_once"]), "the three options", sw[0].options);
check(
  of(b, arch.sessionId, "current_mode_update").some((u) => u.currentModeId === "code"),
  "current_mode_update to code after the switch",
  of(b, arch.sessionId, "current_mode_update"),
);
ok("architect -> code switch as session/request_permission");

b.proc.stdin.end();
await Promise.race([b.exited, sleep(10000)]);
check(!/sk-|Bearer/.test(a.stderr() + b.stderr()), "no secret on stderr", a.stderr() + b.stderr());
console.log("ALL OK");
process.exit(0);
