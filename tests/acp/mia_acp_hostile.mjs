// A hostile model behind mia-acp (issue 45): drives target/release/mia-acp
// with the official ACP TypeScript SDK's client (2.x) against the scenario
// server, in code mode. The model writes `.git/config` (the client must be
// asked; it rejects) and runs a command that prints the provider keys'
// variables (the client allows it; the caller checks what the model got).
//
//   node tests/acp/mia_acp_hostile.mjs SDK_DIR MIA_ACP CONFIG PROJECT
//
// Prints "ok <step>" per step and "ALL OK" at the end; the first failed
// check prints "FAIL <what>" (with what was seen) and exits 1.

import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const [sdkDir, bin, configFile, project] = process.argv.slice(2);
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

const proc = spawn(bin, ["--config", configFile], { stdio: ["pipe", "pipe", "pipe"] });
let stderr = "";
proc.stderr.on("data", (d) => (stderr += d));
proc.on("exit", (code) => code && console.log(`mia-acp exited ${code}: ${stderr}`));
const permissions = [];
const updates = [];
const app = sdk
  .client({ name: "mia-acp-hostile-test" })
  .onRequest("session/request_permission", ({ params }) => {
    permissions.push(params);
    // Anything about a control file is rejected; the rest allowed once.
    const control = JSON.stringify(params).includes(".git");
    const kind = control ? "reject_once" : "allow_once";
    const option = params.options.find((o) => o.kind === kind) ?? params.options[0];
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  })
  .onNotification("session/update", ({ params }) => {
    updates.push(params);
  });
const conn = app.connect(sdk.ndJsonStream(Writable.toWeb(proc.stdin), Readable.toWeb(proc.stdout)));
const call = (method, params) => conn.agent.request(method, params);

await call("initialize", {
  protocolVersion: 1,
  clientCapabilities: { fs: { readTextFile: false, writeTextFile: false } },
  clientInfo: { name: "mia-acp-hostile-test", version: "0" },
});
const sid = (await call("session/new", { cwd: project, mcpServers: [] })).sessionId;
await call("session/set_mode", { sessionId: sid, modeId: "code" });
ok("a session in code mode");

const prompt = async (text) => {
  const r = await call("session/prompt", { sessionId: sid, prompt: [{ type: "text", text }] });
  check(r.stopReason === "end_turn", `the turn "${text}" ends`, r);
};

await prompt(`tool write_file ${JSON.stringify({ path: ".git/config", content: '[core]\n\tfsmonitor = "touch PWNED"\n' })}`);
check(
  permissions.some((p) => JSON.stringify(p).includes(".git/config")),
  "the client was asked about writing .git/config",
  permissions,
);
ok("writing .git/config asked the client");

const asked = permissions.length;
await prompt(`tool bash ${JSON.stringify({ command: "env; echo ran" })}`);
check(permissions.length === asked + 1, "the command was asked about once", permissions.slice(asked));
ok("the command ran");

proc.kill();
console.log("ALL OK");
process.exit(0);
