// The MCP SDK's own client (@modelcontextprotocol/sdk, as pinned through
// tests/mcp) calling one tool of a stdio server many times, for
// benches/mcp_roundtrip.py. Prints one JSON line:
//   { "connect_ms": …, "per_call_us": …, "calls": N }
// Usage: node benches/mcp_sdk_client.cjs TOOL ARGS_JSON N -- COMMAND [ARGS…]
const path = require("path");
const { createRequire } = require("module");

const req = createRequire(path.join(__dirname, "..", "tests", "mcp", "package.json"));
const { Client } = req("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = req("@modelcontextprotocol/sdk/client/stdio.js");

async function main() {
  const [tool, argsJson, n, sep, command, ...args] = process.argv.slice(2);
  if (sep !== "--" || !command) {
    throw new Error("usage: mcp_sdk_client.cjs TOOL ARGS_JSON N -- COMMAND [ARGS…]");
  }
  const calls = Number(n);
  const t0 = process.hrtime.bigint();
  const transport = new StdioClientTransport({ command, args, stderr: "ignore" });
  const client = new Client({ name: "mia-bench", version: "1" });
  await client.connect(transport);
  const connected = process.hrtime.bigint();
  const params = { name: tool, arguments: JSON.parse(argsJson) };
  for (let i = 0; i < 100; i++) await client.callTool(params); // warm up
  const t1 = process.hrtime.bigint();
  for (let i = 0; i < calls; i++) await client.callTool(params);
  const t2 = process.hrtime.bigint();
  await client.close();
  console.log(JSON.stringify({
    connect_ms: Number(connected - t0) / 1e6,
    per_call_us: Number(t2 - t1) / 1e3 / calls,
    calls,
  }));
}

main().catch((e) => {
  console.error(String(e && e.stack || e));
  process.exit(1);
});
