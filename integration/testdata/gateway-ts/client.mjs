// An agent on the official TypeScript MCP SDK calling one tool through
// drainer's gateway (integration/gateway_test.go runs it): the call, the
// same call again after closing and reopening the transport (a new request
// id), then the same call 10 times at once. It prints one JSON line on
// stdout: the request id of every tools/call sent and every answer.
//
// Environment: GATEWAY_URL (http://host:port/mcp), GATEWAY_TOKEN,
// AGENT_RUN_ID (sent as X-Agent-Run-Id), TOOL, ARGS (a JSON object).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

function env(name) {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set`);
  }
  return v;
}

const url = new URL(env("GATEWAY_URL"));
const headers = {
  Authorization: `Bearer ${env("GATEWAY_TOKEN")}`,
  "X-Agent-Run-Id": env("AGENT_RUN_ID"),
};
const tool = env("TOOL");
const args = JSON.parse(env("ARGS"));

// The request ids of the tools/call requests sent, in order.
const requestIds = [];

function transport() {
  const t = new StreamableHTTPClientTransport(url, { requestInit: { headers } });
  const send = t.send.bind(t);
  t.send = (message, options) => {
    if (message.method === "tools/call") {
      requestIds.push(message.id);
    }
    return send(message, options);
  };
  return t;
}

// One client throughout: its request ids keep counting across transports.
const client = new Client({ name: "gateway-ts-agent", version: "1.0.0" });
const answers = [];

async function call(phase) {
  const res = await client.callTool({ name: tool, arguments: args });
  answers.push({
    phase,
    content: res.content ?? null,
    structuredContent: res.structuredContent ?? null,
    isError: res.isError ?? false,
    meta: res._meta ?? {},
  });
}

try {
  await client.connect(transport());
  await call("first");
  await client.close();

  await client.connect(transport());
  await call("reconnected");
  await Promise.all(Array.from({ length: 10 }, () => call("concurrent")));
  await client.close();
} catch (err) {
  process.stderr.write(`gateway-ts: ${err?.stack ?? err}\n`);
  process.exit(1);
}
process.stdout.write(JSON.stringify({ requestIds, answers }) + "\n");
