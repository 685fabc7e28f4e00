#!/usr/bin/env node
// A small ACP client built on the pinned SDK (@agentclientprotocol/sdk 0.17.1):
// spawns an agent, runs initialize -> session/new -> session/prompt (one or
// more turns), answers permission requests and fs/* requests, and prints one
// JSON object per line on stdout. Used by tests/functional/test_acp_counterparts.py
// and benches/acp_sdk_baseline.py as the reference client ("the SDK's own
// client") that mia's client is compared with.
//
//   node tests/acp/sdk_client.mjs '<options JSON>'
//
// Options:
//   command      [program, ...args]                        (required)
//   env          extra environment for the agent            ({})
//   cwd          session cwd, also the agent's working dir  (process cwd)
//   prompts      [{text, delayMs?, cancelAfterMs?, cancelOnFirstChunk?, cancelOnToolCall?}]
//                or `prompt: "text"` for a single turn
//   permission   option kind to pick: "allow_once" (default) | "allow_always" |
//                "reject_once" | "reject_always" | "cancel" (answer cancelled)
//   timeoutMs    overall limit (default 60000): prints {"event":"timeout"}, exits 3
//   stderrFile   where the agent's stderr goes (default: inherited)
//   capabilities clientCapabilities override (default fs read/write, no terminal)
//   quiet        true: no per-update lines (summary still has the kinds)
//
// Lines (t = milliseconds since spawn, from a monotonic clock):
//   {"event":"spawn","t":0,"pid":N}
//   {"event":"initialize","t",agentInfo,protocolVersion,authMethods,agentCapabilities}
//   {"event":"session_new","t",sessionId,modes,models,configOptions}
//   {"event":"update","t",turn,kind,...}            one per session/update
//   {"event":"first_chunk","t",turn}               first agent_message_chunk of a turn
//   {"event":"permission","t",turn,toolCall,options,chosen}
//   {"event":"fs_read"|"fs_write","t",path,...}
//   {"event":"cancel","t",turn}
//   {"event":"prompt_done","t",turn,stopReason,usage}
//   {"event":"summary",timings,turns:[{text,kinds,stopReason,...}],...}  last line
// Exit status 0 when every turn finished (any stop reason), 1 on an error
// (an {"event":"error"} line says which), 3 on timeout.
import { spawn } from "node:child_process";
import { readFile, writeFile, mkdir } from "node:fs/promises";
import { openSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Readable, Writable } from "node:stream";

const here = dirname(fileURLToPath(import.meta.url));
const acp = await import(join(here, "node_modules", "acp-sdk-0.17", "dist", "acp.js"));

const opts = JSON.parse(process.argv[2] ?? "{}");
if (!Array.isArray(opts.command) || opts.command.length === 0) {
  console.error("sdk_client: options need a non-empty `command` array");
  process.exit(2);
}
const prompts = opts.prompts ?? [{ text: opts.prompt ?? "echo hello from the sdk client" }];
const permissionKind = opts.permission ?? "allow_once";
const cwd = opts.cwd ?? process.cwd();

const t0 = process.hrtime.bigint();
const now = () => Number(process.hrtime.bigint() - t0) / 1e6;
const emit = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const timings = {};
const turns = [];
let turn = -1;
let sessionId = null;
let connection = null;

const stderr = opts.stderrFile ? openSync(opts.stderrFile, "a") : "inherit";
// A relative program path is taken from this client's cwd, not the agent's.
const program = opts.command[0].includes("/") ? resolve(opts.command[0]) : opts.command[0];
const child = spawn(program, opts.command.slice(1), {
  cwd,
  env: { ...process.env, ...(opts.env ?? {}) },
  stdio: ["pipe", "pipe", stderr],
});
timings.spawn = 0;
emit({ event: "spawn", t: 0, pid: child.pid });

let finished = false;
function finish(code, extra = {}) {
  if (finished) return;
  finished = true;
  emit({ event: "summary", timings, turns, sessionId, ...extra });
  try {
    child.kill("SIGTERM");
  } catch {}
  // Give the agent a moment to exit, then leave regardless.
  const force = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch {}
    process.exit(code);
  }, 2000);
  child.once("exit", () => {
    clearTimeout(force);
    process.exit(code);
  });
  if (child.exitCode !== null || child.signalCode !== null) process.exit(code);
}

child.on("error", (err) => {
  emit({ event: "error", t: now(), where: "spawn", message: String(err?.message ?? err) });
  finish(1);
});
child.on("exit", (code, signal) => {
  if (!finished) {
    emit({ event: "agent_exit", t: now(), code, signal });
    // Pending requests never get an answer now; let stdout drain, then stop.
    setTimeout(() => finish(1, { error: `agent exited (code ${code}, signal ${signal})` }), 200);
  }
});

const timer = setTimeout(() => {
  emit({ event: "timeout", t: now(), timeoutMs: opts.timeoutMs ?? 60000 });
  finish(3);
}, opts.timeoutMs ?? 60000);
timer.unref();

function current() {
  return turns[turn];
}

function maybeCancel(reason) {
  const p = prompts[turn];
  const cur = current();
  if (!p || !cur || cur.cancelSent) return;
  if ((reason === "chunk" && p.cancelOnFirstChunk) || (reason === "tool" && p.cancelOnToolCall)) {
    sendCancel();
  }
}

function sendCancel() {
  const cur = current();
  if (!cur || cur.cancelSent || cur.stopReason) return;
  cur.cancelSent = true;
  emit({ event: "cancel", t: now(), turn });
  connection.cancel({ sessionId }).catch((err) => {
    emit({ event: "error", t: now(), where: "cancel", message: String(err?.message ?? err) });
  });
}

class Client {
  async sessionUpdate(params) {
    const u = params.update;
    const cur = current();
    const kind = u.sessionUpdate;
    const line = { event: "update", t: now(), turn, kind };
    if (kind === "agent_message_chunk" || kind === "agent_thought_chunk" || kind === "user_message_chunk") {
      line.contentType = u.content?.type;
      if (u.content?.type === "text") line.text = u.content.text;
    } else if (kind === "tool_call" || kind === "tool_call_update") {
      Object.assign(line, {
        toolCallId: u.toolCallId, title: u.title, toolKind: u.kind, status: u.status,
        rawInput: u.rawInput,
      });
    } else if (kind === "usage_update") {
      Object.assign(line, { used: u.used, size: u.size, cost: u.cost });
    } else if (kind === "available_commands_update") {
      line.commands = (u.availableCommands ?? []).map((c) => c.name);
    } else if (kind === "current_mode_update") {
      line.modeId = u.currentModeId;
    } else if (kind === "plan") {
      line.entries = u.entries?.length;
    }
    if (!opts.quiet) emit(line);
    if (!cur) return; // updates outside a turn (e.g. commands after session/new)
    cur.kinds.push(kind);
    if (kind === "agent_message_chunk" && u.content?.type === "text") {
      cur.text += u.content.text;
      if (cur.firstChunk === undefined) {
        cur.firstChunk = now();
        if (turn === 0) timings.first_chunk = cur.firstChunk;
        emit({ event: "first_chunk", t: cur.firstChunk, turn });
        maybeCancel("chunk");
      }
    } else if (kind === "tool_call") {
      cur.toolCalls.push({ toolCallId: u.toolCallId, title: u.title, kind: u.kind, rawInput: u.rawInput });
      maybeCancel("tool");
    } else if (kind === "tool_call_update" && u.status) {
      cur.toolStatuses.push({ toolCallId: u.toolCallId, status: u.status });
    } else if (kind === "usage_update") {
      cur.usageUpdates.push({ used: u.used, size: u.size, cost: u.cost });
    }
  }

  async requestPermission(params) {
    const cur = current();
    const options = params.options ?? [];
    let chosen = null;
    let outcome;
    if (permissionKind === "cancel") {
      outcome = { outcome: "cancelled" };
    } else {
      const fallback = permissionKind.startsWith("allow") ? "allow" : "reject";
      chosen = options.find((o) => o.kind === permissionKind) ??
        options.find((o) => o.kind.startsWith(fallback)) ?? null;
      outcome = chosen ? { outcome: "selected", optionId: chosen.optionId } : { outcome: "cancelled" };
    }
    const entry = {
      t: now(), turn,
      toolCall: { toolCallId: params.toolCall?.toolCallId, title: params.toolCall?.title,
                  kind: params.toolCall?.kind },
      options: options.map((o) => ({ optionId: o.optionId, kind: o.kind, name: o.name })),
      chosen: chosen?.optionId ?? null,
    };
    emit({ event: "permission", ...entry });
    cur?.permissions.push(entry);
    return { outcome };
  }

  async readTextFile(params) {
    let content = await readFile(params.path, "utf8");
    if (params.line != null || params.limit != null) {
      const lines = content.split("\n");
      const start = Math.max(0, (params.line ?? 1) - 1);
      const end = params.limit != null ? start + params.limit : lines.length;
      content = lines.slice(start, end).join("\n");
    }
    emit({ event: "fs_read", t: now(), turn, path: params.path, line: params.line, limit: params.limit });
    current()?.fs.push({ op: "read", path: params.path });
    return { content };
  }

  async writeTextFile(params) {
    await mkdir(dirname(params.path), { recursive: true });
    await writeFile(params.path, params.content, "utf8");
    emit({ event: "fs_write", t: now(), turn, path: params.path, bytes: Buffer.byteLength(params.content) });
    current()?.fs.push({ op: "write", path: params.path });
    return {};
  }
}

async function main() {
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  connection = new acp.ClientSideConnection(() => new Client(), stream);

  const init = await connection.initialize({
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: opts.capabilities ?? { fs: { readTextFile: true, writeTextFile: true }, terminal: false },
    clientInfo: { name: "mia-sdk-test-client", version: "0.1.0" },
  });
  timings.initialize = now();
  emit({
    event: "initialize", t: timings.initialize, protocolVersion: init.protocolVersion,
    agentInfo: init.agentInfo ?? null, authMethods: (init.authMethods ?? []).map((m) => m.id),
    agentCapabilities: init.agentCapabilities ?? null,
  });

  const session = await connection.newSession({ cwd, mcpServers: [] });
  sessionId = session.sessionId;
  timings.session_new = now();
  emit({
    event: "session_new", t: timings.session_new, sessionId,
    modes: session.modes ? {
      current: session.modes.currentModeId, available: session.modes.availableModes?.map((m) => m.id),
    } : null,
    models: session.models ? {
      current: session.models.currentModelId, available: session.models.availableModels?.map((m) => m.modelId),
    } : null,
    configOptions: (session.configOptions ?? []).map((o) => o.id),
  });

  for (let i = 0; i < prompts.length; i++) {
    const p = typeof prompts[i] === "string" ? { text: prompts[i] } : prompts[i];
    prompts[i] = p;
    if (p.delayMs) await new Promise((r) => setTimeout(r, p.delayMs));
    turn = i;
    turns.push({ text: "", kinds: [], toolCalls: [], toolStatuses: [], permissions: [], fs: [],
                 usageUpdates: [], started: now() });
    let cancelTimer = null;
    if (p.cancelAfterMs != null) cancelTimer = setTimeout(sendCancel, p.cancelAfterMs);
    const res = await connection.prompt({ sessionId, prompt: [{ type: "text", text: p.text }] });
    if (cancelTimer) clearTimeout(cancelTimer);
    const cur = turns[i];
    cur.stopReason = res.stopReason;
    cur.usage = res.usage ?? null;
    cur.done = now();
    if (i === 0) timings.prompt_done = cur.done;
    emit({ event: "prompt_done", t: cur.done, turn: i, stopReason: res.stopReason, usage: cur.usage });
  }
  finish(0);
}

main().catch((err) => {
  emit({
    event: "error", t: now(), where: "protocol",
    message: String(err?.message ?? err), code: err?.code, data: err?.data,
  });
  finish(1);
});
