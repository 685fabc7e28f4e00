// MCP servers an editor passes to mia-acp (issue 13): drives
// target/release/mia-acp with the official ACP TypeScript SDK's client (2.x)
// against the scenario server as the model provider; the servers are the
// real @modelcontextprotocol/server-everything over stdio.
//
//   node tests/acp/mia_acp_mcp.mjs SDK_DIR MIA_ACP CONFIG PROJECT EVERYTHING_BIN SECRET HTTP_URL
//
// HTTP_URL: the same server run as `streamableHttp`, passed as `type: "http"`.
//
// Prints "ok <step>" per step and "ALL OK" at the end; the first failed
// check prints "FAIL <what>" (with what was seen) and exits 1.

import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [sdkDir, bin, configFile, project, everything, secret, httpUrl] = process.argv.slice(2);
const pkg = JSON.parse(fs.readFileSync(path.join(sdkDir, "package.json"), "utf8"));
const sdk = await import(pathToFileURL(path.join(sdkDir, pkg.exports?.["."]?.import ?? pkg.main)).href);

function fail(what, seen) {
  console.log(`FAIL ${what}${seen === undefined ? "" : ": " + JSON.stringify(seen).slice(0, 3000)}`);
  process.exit(1);
}
function check(cond, what, seen) {
  if (!cond) fail(what, seen);
}
const ok = (step) => console.log(`ok ${step}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(pred, what, seen) {
  for (let i = 0; i < 3000; i++) {
    const v = pred();
    if (v) return v;
    await sleep(10);
  }
  fail(`timed out waiting for ${what}`, seen?.());
}

const proc = spawn(bin, ["--config", configFile], { stdio: ["pipe", "pipe", "pipe"] });
let stderr = "";
proc.stderr.on("data", (d) => (stderr += d));
proc.on("exit", (code) => code && console.log(`mia-acp exited ${code}: ${stderr}`));
const updates = [];
const permissions = [];
const app = sdk
  .client({ name: "mia-acp-mcp-test" })
  .onRequest("session/request_permission", ({ params }) => {
    permissions.push(params);
    const allow = params.options.find((o) => o.kind === "allow_once") ?? params.options[0];
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  })
  .onNotification("session/update", ({ params }) => {
    updates.push(params);
  });
const conn = app.connect(sdk.ndJsonStream(Writable.toWeb(proc.stdin), Readable.toWeb(proc.stdout)));
const call = (method, params) => conn.agent.request(method, params);
const of = (sid, kind) => updates.filter((u) => u.sessionId === sid && u.update.sessionUpdate === kind).map((u) => u.update);
const text = (sid) =>
  of(sid, "agent_message_chunk")
    .map((u) => u.content?.text ?? "")
    .join("");

/** The error a request failed with (fails the run when it succeeded). */
async function refused(method, params, what) {
  try {
    const r = await call(method, params);
    fail(`${what}: it was accepted`, r);
  } catch (e) {
    return e;
  }
}

const init = await call("initialize", {
  protocolVersion: 1,
  clientCapabilities: { fs: { readTextFile: false, writeTextFile: false } },
  clientInfo: { name: "mia-acp-mcp-test", version: "0" },
});
check(init.agentCapabilities?.mcpCapabilities?.http === true, "initialize offers mcpCapabilities.http", init.agentCapabilities);
ok("initialize offers MCP over http");

// Each start of a server appends a line to starts-NAME in the project.
const starts = (name) => {
  const f = path.join(project, `starts-${name}`);
  return fs.existsSync(f) ? fs.readFileSync(f, "utf8").split("\n").filter(Boolean).length : 0;
};
const server = (name) => ({
  name,
  command: "/bin/sh",
  args: ["-c", `echo started >> starts-${name}; exec "$0" stdio`, everything],
  env: [{ name: "MIA_TEST_SECRET", value: secret }],
});

// Session A runs `everything`; session B runs the same server as `other`.
const a = (await call("session/new", { cwd: project, mcpServers: [server("everything")] })).sessionId;
const b = (await call("session/new", { cwd: project, mcpServers: [server("other")] })).sessionId;
for (const sid of [a, b]) {
  await call("session/set_mode", { sessionId: sid, modeId: "code" });
}
ok("two sessions with MCP servers of their own");

async function echo(sid, tool, message) {
  const before = text(sid).length;
  const r = await call("session/prompt", {
    sessionId: sid,
    prompt: [{ type: "text", text: `tool ${tool} {"message": "${message}"}` }],
  });
  check(r.stopReason === "end_turn", `the ${tool} turn ends`, { r, text: text(sid) });
  await until(() => text(sid).slice(before).includes("tool said:"), `the model got ${tool}'s result`, () => text(sid).slice(before));
  return text(sid).slice(before);
}

let said = await echo(a, "everything__echo", "hello over acp");
check(said.includes("tool said: Echo: hello over acp"), "session A's model got the MCP tool's result", said);
const done = of(a, "tool_call_update").filter((u) => u.status === "completed");
check(
  done.some((u) => JSON.stringify(u.content ?? u.rawOutput ?? "").includes("Echo: hello over acp")),
  "the client saw the tool call complete with the server's result",
  of(a, "tool_call_update"),
);
ok("session A called everything__echo through mia's agent loop");

said = await echo(b, "other__echo", "from b");
check(said.includes("tool said: Echo: from b"), "session B's model got its own server's result", said);
said = await echo(a, "everything__echo", "still here");
check(said.includes("tool said: Echo: still here"), "session A's server still answers after B started its own", said);
check(starts("everything") === 1 && starts("other") === 1, "B's turn did not stop A's server (each started once)", {
  everything: starts("everything"),
  other: starts("other"),
});
ok("session B has its own server and A's still answers");

async function tools(sid) {
  const before = text(sid).length;
  await call("session/prompt", { sessionId: sid, prompt: [{ type: "text", text: "/tools" }] });
  return until(() => text(sid).slice(before).includes("Tools in"), "the /tools answer", () => text(sid).slice(before)) && text(sid).slice(before);
}
let list = await tools(a);
check(list.includes("`everything__echo`") && !list.includes("other__"), "A lists its own server's tools only", list);
list = await tools(b);
check(list.includes("`other__echo`") && !list.includes("everything__"), "B lists its own server's tools only", list);
const c = (await call("session/new", { cwd: project, mcpServers: [] })).sessionId;
await call("session/set_mode", { sessionId: c, modeId: "code" });
list = await tools(c);
check(!list.includes("__echo"), "a session without servers has no MCP tools", list);
ok("each session sees its own servers' tools");

// Bad entries: one clear invalid-params error naming the entry.
let e = await refused(
  "session/new",
  { cwd: project, mcpServers: [server("good"), { name: "bad name", command: everything, args: [], env: [] }] },
  "a server named with a space",
);
check(e.code === -32602, "invalid params", e);
check(String(e.message).includes("mcpServers[1] (`bad name`) has a name"), "the message names the entry", e);
const many = Array.from({ length: 33 }, (_, i) => server(`s${i}`));
e = await refused("session/new", { cwd: project, mcpServers: many }, "33 servers");
check(e.code === -32602 && String(e.message).includes("33 mcpServers in one session (at most 32)"), "too many servers", e);
e = await refused(
  "session/new",
  { cwd: project, mcpServers: [{ name: "x", command: everything, args: [], env: [{ name: "K", value: `${secret}\u0000` }] }] },
  "an env value with NUL",
);
check(e.code === -32602 && String(e.message).includes("env `K`"), "a bad env value is named", e);
check(!JSON.stringify(e).includes(secret), "the error never shows the value", e);
e = await refused("session/new", { cwd: project, mcpServers: [{ name: "x", args: 5 }] }, "a server without a command");
check(e.code === -32602, "a malformed entry is invalid params", e);
e = await refused(
  "session/load",
  { sessionId: a, cwd: project, mcpServers: [{ type: "sse", name: "old", url: "http://127.0.0.1:1/sse", headers: [] }] },
  "an SSE server",
);
check(e.code === -32602 && String(e.message).includes("uses SSE"), "SSE is refused", e);
ok("bad mcpServers entries are refused with a clear error");

// A streamable-HTTP server, with a header (a secret too).
const d = (
  await call("session/new", {
    cwd: project,
    mcpServers: [{ type: "http", name: "web", url: httpUrl, headers: [{ name: "X-Test-Token", value: secret }] }],
  })
).sessionId;
await call("session/set_mode", { sessionId: d, modeId: "code" });
said = await echo(d, "web__echo", "over http");
check(said.includes("tool said: Echo: over http"), "an http server's tool answers", said);
ok("a streamable-HTTP server from the client");

// A server that cannot start: the turn goes on, and the client reads why.
const f = (
  await call("session/new", {
    cwd: project,
    mcpServers: [{ name: "broken", command: "/nonexistent/mcp-server", args: [], env: [] }],
  })
).sessionId;
const r = await call("session/prompt", { sessionId: f, prompt: [{ type: "text", text: "hello" }] });
check(r.stopReason === "end_turn", "the turn with a broken server ends", r);
const warned = await until(() => text(f).includes("MCP server `broken` did not start") && text(f), "the warning", () => text(f));
check(warned.includes("/nonexistent/mcp-server") && warned.includes("the MCP servers the editor passes"), "it names the server and the fix", warned);
ok("a server that cannot start is one warning in the answer");

// A session reloaded with its server still calls it.
await call("session/load", { sessionId: a, cwd: project, mcpServers: [server("everything")] });
said = await echo(a, "everything__echo", "after load");
check(said.includes("tool said: Echo: after load"), "the loaded session calls its server", said);
check(starts("everything") === 1, "a load with the same servers keeps them running", starts("everything"));
ok("session/load passes the servers on");

proc.stdin.end();
await new Promise((r) => proc.on("exit", r));
console.log("ALL OK");
