// Benchmark (not a test), run by tests/bench_mcp.sh: tool calls per second through
// `capsule mcp` from the official MCP TypeScript SDK's client, one call awaited before the
// next, as a framework makes them. Prints "append N" and "recall N" (calls per second).
//
//   node tests/mcp/bench_client.mjs CAPSULE CAPSULE_DIR CALLS
import {Client} from '@modelcontextprotocol/sdk/client/index.js';
import {StdioClientTransport} from '@modelcontextprotocol/sdk/client/stdio.js';

const [capsule, dir, calls] = [process.argv[2], process.argv[3], Number(process.argv[4] ?? 2000)];
const client = new Client({name: 'bench_client', version: '1.0.0'});
await client.connect(new StdioClientTransport({command: capsule, args: ['mcp', dir]}));

async function tool(name, args) {
  const result = await client.callTool({name, arguments: args});
  if (result.isError) throw new Error(`${name}: ${result.content[0].text}`);
  return JSON.parse(result.content[0].text);
}

const text = (i) => `message ${i}: please look at the build and tell me what broke`;
let start = performance.now();
let first;
for (let i = 0; i < calls; ++i) {
  const {message} = await tool('history_append', {role: 'user', content: text(i)});
  first ??= message.id;
}
const append = calls / ((performance.now() - start) / 1000);
for (let k = 0; k < 20; ++k) await tool('memory_remember', {subject: 'user', key: `k${k}`, value: k, source: first});
start = performance.now();
for (let i = 0; i < calls; ++i) await tool('memory_recall', {subject: 'user'});
const recall = calls / ((performance.now() - start) / 1000);
await client.close();
console.log(`append ${append.toFixed(0)}`);
console.log(`recall ${recall.toFixed(0)}`);
