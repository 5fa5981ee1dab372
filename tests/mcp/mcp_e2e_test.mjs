// End to end: `capsule mcp` driven by the official MCP TypeScript SDK's client over stdio, as a
// framework would drive it. Initialize, list tools, call every tool, read the resources; a
// framework swap through the ports across a restart of the server; bad inputs through the real
// client, each an error reply after which the server still answers and nothing is half-written;
// and MCP writes racing `capsule log append` and a mount's writes.
//
//   node tests/mcp/mcp_e2e_test.mjs CAPSULE CAPSULEFS
//
// Bazel runs it as //tests:mcp_e2e_test; tests/setup.sh installs the client (npm ci).
import assert from 'node:assert/strict';
import {spawn, spawnSync} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {after, test} from 'node:test';

import Ajv2020 from 'ajv/dist/2020.js';
import {Client} from '@modelcontextprotocol/sdk/client/index.js';
import {StdioClientTransport} from '@modelcontextprotocol/sdk/client/stdio.js';
import {ErrorCode, LATEST_PROTOCOL_VERSION, McpError} from '@modelcontextprotocol/sdk/types.js';

const HERE = path.dirname(fs.realpathSync(new URL(import.meta.url).pathname));
const CAPSULE = path.resolve(process.argv[2] ?? 'bazel-bin/capsule');
const CAPSULEFS = path.resolve(process.argv[3] ?? 'bazel-bin/capsulefs');
const ROOT = fs.mkdtempSync(path.join(process.env.TEST_TMPDIR ?? os.tmpdir(), 'mcp-e2e-'));

const TOOLS = [
  'history_load', 'history_append', 'memory_recall', 'memory_remember', 'memory_expire', 'memory_why',
  'run_open', 'run_mark_awaiting', 'run_close', 'runs_in_flight', 'memory_search',
];

function run(program, args, input) {
  const result = spawnSync(program, args, {input, encoding: 'utf8'});
  return {status: result.status, out: result.stdout, err: result.stderr};
}

function capsule(...args) {
  const result = run(CAPSULE, args);
  assert.equal(result.status, 0, `capsule ${args.join(' ')}: ${result.err}`);
  return result.out;
}

function newCapsule(name) {
  const dir = path.join(ROOT, name);
  capsule('init', dir, '--id', name, '--name', `Agent ${name}`);
  return dir;
}

const journalOf = (dir) => fs.readFileSync(path.join(dir, 'memory/timeline_events.jsonl'), 'utf8');

// What a move's retire leaves in the holder record (capsule-protocol(7)), written as
// TransitionHolder writes it: the whole record, renamed into place.
function setHolderState(dir, state) {
  const file = path.join(dir, '.capsule/holder.json');
  const record = JSON.parse(fs.readFileSync(file, 'utf8'));
  record.state = state;
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(record));
  fs.renameSync(`${file}.tmp`, file);
}

async function connect(target, name) {
  const transport = new StdioClientTransport({command: CAPSULE, args: ['mcp', target], stderr: 'pipe'});
  const client = new Client({name, version: '1.0.0'});
  const errors = [];
  client.onerror = (error) => errors.push(error);
  await client.connect(transport);
  return {client, transport, errors};
}

async function call(client, name, args) {
  return client.callTool({name, arguments: args});
}

async function ok(client, name, args = {}) {
  const result = await call(client, name, args);
  assert.ok(!result.isError, `${name}: ${JSON.stringify(result.content)}`);
  // The result is carried once: its JSON text, no structuredContent beside it.
  assert.equal(result.structuredContent, undefined);
  assert.equal(result.content.length, 1);
  return JSON.parse(result.content[0].text);
}

async function refused(client, name, args) {
  const result = await call(client, name, args);
  assert.equal(result.isError, true, `${name} should have been refused: ${JSON.stringify(result)}`);
  assert.equal(result.content[0].type, 'text');
  return result.content[0].text;
}

test('initialize, list tools, call every tool, read the resources', async () => {
  const dir = newCapsule('planner');
  fs.writeFileSync(path.join(dir, 'memory/working_memory.md'), '# Notes\nThe user writes in French.\n');
  const {client} = await connect(dir, 'e2e-tour');
  try {
    assert.equal(client.getServerVersion().name, 'capsule');
    assert.ok(client.getServerCapabilities().tools);
    assert.ok(client.getServerCapabilities().resources);
    assert.match(client.getInstructions(), /planner/);
    assert.equal(LATEST_PROTOCOL_VERSION, '2025-11-25');  // the revision the server answers with
    await client.ping();

    // Every tool, with an input schema that a JSON Schema 2020-12 validator compiles.
    const {tools} = await client.listTools();
    assert.deepEqual(tools.map((tool) => tool.name), TOOLS);
    const ajv = new Ajv2020({strict: false, allErrors: true, formats: {'date-time': true}});
    for (const tool of tools) {
      assert.equal(tool.inputSchema.type, 'object', tool.name);
      assert.equal(tool.inputSchema.additionalProperties, false, tool.name);
      assert.ok(ajv.compile(tool.inputSchema), tool.name);
      assert.ok(tool.description.length > 20, tool.name);
    }

    // history: append each role, then load in pages, newest last.
    const user = (await ok(client, 'history_append', {role: 'user', content: 'Je préfère le français.'})).message;
    assert.match(user.id, /^[0-9a-f]{64}$/);
    assert.equal(user.seq, 1);
    await ok(client, 'history_append', {role: 'assistant', content: 'Entendu.', provider: 'anthropic', model: 'm-1'});
    await ok(client, 'history_append',
        {role: 'tool_call', content: '{"city":"Lyon"}', tool_call_id: 'call-1', tool_name: 'weather'});
    await ok(client, 'history_append', {role: 'tool', content: 'sunny', tool_call_id: 'call-1', is_error: false});
    const last = await ok(client, 'history_load', {limit: 3});
    assert.deepEqual(last.messages.map((m) => m.seq), [2, 3, 4]);
    assert.equal(last.next_before_seq, 2);
    const first = await ok(client, 'history_load', {limit: 3, before_seq: last.next_before_seq});
    assert.deepEqual(first.messages.map((m) => m.content), ['Je préfère le français.']);
    assert.equal(first.next_before_seq, null);

    // memory: remember with provenance, recall now and as of before, why, expire.
    const fact = (await ok(client, 'memory_remember',
        {subject: 'user', key: 'language', value: 'fr', confidence: 0.9, source: user.id})).fact;
    assert.equal(fact.source, user.id);
    const now = await ok(client, 'memory_recall', {subject: 'user'});
    assert.deepEqual(now.facts.map((f) => [f.key, f.value]), [['language', 'fr']]);
    const before = await ok(client, 'memory_recall', {subject: 'user', keys: ['language'], as_of: '2000-01-01T00:00:00Z'});
    assert.deepEqual(before.facts, []);
    const why = await ok(client, 'memory_why', {subject: 'user', key: 'language'});
    assert.equal(why.source.message.content, 'Je préfère le français.');
    const ended = (await ok(client, 'memory_expire', {subject: 'user', key: 'language', source: user.id})).fact;
    assert.notEqual(ended.valid_to, null);
    assert.deepEqual((await ok(client, 'memory_recall', {subject: 'user'})).facts, []);

    // runs: open, mark awaiting, in flight, close.
    await ok(client, 'run_open', {run_id: 'tour-1', framework: 'e2e', thread_key: 'thread-1'});
    const waiting = (await ok(client, 'run_mark_awaiting', {run_id: 'tour-1', awaiting: 'approval'})).run;
    assert.equal(waiting.status, 'awaiting');
    assert.deepEqual((await ok(client, 'runs_in_flight')).runs.map((r) => r.run_id), ['tour-1']);
    const closed = (await ok(client, 'run_close', {run_id: 'tour-1', status: 'done', cost: 0.5})).run;
    assert.equal(closed.status, 'done');
    assert.equal(closed.cost, 0.5);
    assert.deepEqual((await ok(client, 'runs_in_flight', {})).runs, []);

    // Resources: the notes and the conversation.
    const {resources} = await client.listResources();
    assert.deepEqual(resources.map((r) => r.uri), ['capsule://planner/notes', 'capsule://planner/conversations/main']);
    const notes = await client.readResource({uri: 'capsule://planner/notes'});
    assert.equal(notes.contents[0].text, '# Notes\nThe user writes in French.\n');
    const main = await client.readResource({uri: 'capsule://planner/conversations/main'});
    assert.equal(main.contents[0].mimeType, 'application/json');
    assert.equal(JSON.parse(main.contents[0].text).messages.length, 4);
    const {resourceTemplates} = await client.listResourceTemplates();
    assert.equal(resourceTemplates[0].uriTemplate, 'capsule://planner/conversations/{conversation}');
  } finally {
    await client.close();
  }

  // Every write is a journal event like any other: chained, checked, projected.
  const events = capsule('log', dir, '--json').trim().split('\n').map((line) => JSON.parse(line));
  assert.deepEqual(events.map((e) => e.type), [
    'user_message', 'assistant_message', 'tool_call', 'tool_result', 'fact_remembered', 'fact_expired',
    'run_opened', 'run_awaiting', 'run_closed',
  ]);
  assert.deepEqual(events[2].data.arguments, {city: 'Lyon'});
  const facts = JSON.parse(capsule('facts', dir, 'user', '--all', '--json'));
  assert.equal(facts[0].source, events[0].id);
});

test('a framework swap through the ports, across a restart of the server', async () => {
  const dir = newCapsule('swap');
  const appended = [];
  let waiting;
  // Framework A opens a run, works, and stops to wait for a human.
  {
    const {client} = await connect(dir, 'framework-a');
    const run = (await ok(client, 'run_open',
        {run_id: 'run-42', framework: 'framework-a', thread_key: 'a-thread-7', conversation: 'support'})).run;
    assert.equal(run.first_framework, 'framework-a');
    for (const message of [
      {role: 'system', content: 'You help with refunds.'},
      {role: 'user', content: 'Refund order 1234, please.'},
      {role: 'tool_call', content: '{"order":1234}', tool_call_id: 'c1', tool_name: 'lookup_order'},
      {role: 'tool', content: '{"total":42}', tool_call_id: 'c1'},
      {role: 'assistant', content: 'A refund of 42 needs approval.', provider: 'openai', model: 'gpt-x'},
    ]) {
      appended.push((await ok(client, 'history_append', {...message, conversation: 'support', run_id: 'run-42'})).message);
    }
    waiting = (await ok(client, 'run_mark_awaiting', {run_id: 'run-42', awaiting: 'human approval'})).run;
    assert.equal(waiting.steps, 7);  // every event of the run: opened, five messages, awaiting
    await client.close();
  }
  // Framework B, on a new server process, finds the run in flight and the same history.
  const {client} = await connect(dir, 'framework-b');
  try {
    const flying = (await ok(client, 'runs_in_flight')).runs;
    assert.equal(flying.length, 1);
    assert.equal(flying[0].run_id, 'run-42');
    assert.equal(flying[0].status, 'awaiting');
    assert.equal(flying[0].awaiting, 'human approval');
    assert.equal(flying[0].framework, 'framework-a');
    assert.equal(flying[0].conversation, 'support');
    const loaded = await ok(client, 'history_load', {conversation: flying[0].conversation});
    assert.deepEqual(loaded.messages, appended);
    const resumed = (await ok(client, 'run_open',
        {run_id: 'run-42', framework: 'framework-b', thread_key: 'b-thread-1', conversation: 'support'})).run;
    assert.equal(resumed.framework, 'framework-b');
    assert.equal(resumed.first_framework, 'framework-a');
    assert.equal(resumed.resumes, 1);
    await ok(client, 'history_append', {role: 'assistant', content: 'Approved: refunded 42.', provider: 'anthropic',
      model: 'claude-x', conversation: 'support', run_id: 'run-42'});
    const closed = (await ok(client, 'run_close', {run_id: 'run-42', status: 'done'})).run;
    assert.equal(closed.status, 'done');
    assert.equal(closed.steps, waiting.steps + 3);  // resumed, one message, closed
    assert.deepEqual((await ok(client, 'runs_in_flight')).runs, []);
  } finally {
    await client.close();
  }
});

test('bad inputs through the real client: error replies, the server goes on, nothing half-written', async () => {
  const dir = newCapsule('hostile');
  const {client, transport, errors} = await connect(dir, 'e2e-hostile');
  try {
    const said = (await ok(client, 'history_append', {role: 'user', content: 'hello'})).message;
    const journal = journalOf(dir);

    // An unknown tool: a JSON-RPC error naming the known ones.
    await assert.rejects(call(client, 'no_such_tool', {}), (error) => {
      assert.ok(error instanceof McpError);
      assert.equal(error.code, ErrorCode.InvalidParams);
      assert.match(error.message, /Unknown tool: no_such_tool \(known: history_load/);
      return true;
    });
    // Missing and wrong-typed arguments, an unknown one: tool errors that say what is wrong.
    assert.match(await refused(client, 'history_append', {content: 'no role'}), /arguments\.role: missing/);
    assert.match(await refused(client, 'history_append', {role: 'assistant', content: 'x'}),
        /arguments\.provider: missing .*role assistant needs provider and model/);
    assert.match(await refused(client, 'history_load', {limit: 'ten'}),
        /arguments\.limit: must be an integer \(got a string\)/);
    assert.match(await refused(client, 'memory_recall', {subject: 42}), /arguments\.subject: must be a string/);
    assert.match(await refused(client, 'run_close', {run_id: 'r', status: 'done', why: 'x'}),
        /unknown argument "why"/);
    assert.match(await refused(client, 'history_append',
        {role: 'tool_call', content: 'not json', tool_call_id: 'c', tool_name: 't'}), /not valid JSON/);
    // A fact without provenance, and with a source that is no event of the journal.
    assert.match(await refused(client, 'memory_remember', {subject: 'user', key: 'k', value: 1}),
        /arguments\.source: missing \(required: Provenance/);
    assert.match(await refused(client, 'memory_remember', {subject: 'user', key: 'k', value: 1, source: 'f'.repeat(64)}),
        /is not an event of the journal/);
    assert.match(await refused(client, 'run_mark_awaiting', {run_id: 'ghost', awaiting: 'x'}), /never opened/);

    // The same verdicts as an independent JSON Schema validator on the published schemas.
    const schemas = Object.fromEntries((await client.listTools()).tools.map((t) => [t.name, t.inputSchema]));
    const ajv = new Ajv2020({strict: false, formats: {'date-time': true}});
    for (const [name, args] of [
      ['history_append', {role: 'user', content: 'x', provider: 'p'}],
      ['history_append', {role: 'tool', content: 'x'}],
      ['history_load', {limit: 0}],
      ['history_load', {limit: 1001}],
      ['memory_recall', {subject: 'u', as_of: '2026-12-02 16:40:00'}],
      ['memory_remember', {subject: 'u', key: 'k', value: null, source: said.id}],
      ['memory_remember', {subject: 'u', key: 'k', value: 1, source: said.id.toUpperCase()}],
      ['memory_remember', {subject: 'u', key: 'k', value: 1, source: said.id, confidence: 1.5}],
      ['run_open', {run_id: '', framework: 'f', thread_key: 't'}],
      ['run_close', {run_id: 'r', status: 'done', cost: -1}],
    ]) {
      assert.equal(ajv.validate(schemas[name], args), false, `${name} ${JSON.stringify(args)}`);
      await refused(client, name, args);
    }
    assert.equal(journalOf(dir), journal, 'a refused call wrote to the journal');

    // A malformed JSON-RPC line with no id to read: -32700 with id null, then the next
    // requests are answered.
    const raw = [];
    transport._process.stdout.on('data', (chunk) => raw.push(chunk.toString('utf8')));
    transport._process.stdin.write('{"jsonrpc":"2.0","id":\n');
    await client.ping();
    const reply = raw.join('').split('\n').map((line) => line.trim()).filter(Boolean)
        .map((line) => JSON.parse(line)).find((message) => message.error);
    assert.deepEqual(reply.id, null);
    assert.equal(reply.error.code, ErrorCode.ParseError);
    assert.ok(errors.length >= 1);  // the SDK reports the id-less reply to onerror, and goes on
    assert.equal((await ok(client, 'history_load')).messages.length, 1);

    // A write to a retired capsule: refused, and reads go on.
    setHolderState(dir, 'retired');
    assert.match(await refused(client, 'history_append', {role: 'user', content: 'after the move'}),
        /retired here at epoch 1; read-only/);
    assert.match(await refused(client, 'run_open', {run_id: 'r', framework: 'f', thread_key: 't'}), /retired/);
    assert.match(await refused(client, 'memory_remember', {subject: 'u', key: 'k', value: 1, source: said.id}),
        /retired/);
    assert.equal((await ok(client, 'history_load')).messages.length, 1);
    assert.equal(journalOf(dir), journal, 'a retired capsule took a write');
    // Frozen: refused at once (an MCP client would time out waiting), then a thaw lets it go on.
    setHolderState(dir, 'frozen');
    assert.match(await refused(client, 'history_append', {role: 'user', content: 'frozen'}), /frozen at epoch 1; thaw it first/);
    setHolderState(dir, 'active');
    await ok(client, 'history_append', {role: 'user', content: 'thawed'});
  } finally {
    await client.close();
  }
  assert.match(capsule('log', dir), /thawed/);  // the chain checks from end to end
});

test('MCP writes racing capsule log append and a mount never interleave badly', async (t) => {
  if (!fs.existsSync('/dev/fuse') || run('fusermount3', ['-V']).status !== 0) {
    t.skip('no FUSE here');
    return;
  }
  const dir = newCapsule('racer');
  const mnt = path.join(ROOT, 'mnt');
  fs.mkdirSync(mnt);
  const driver = spawn(CAPSULEFS, [dir, mnt, '-f'], {stdio: 'ignore'});
  const exited = new Promise((resolve) => driver.on('exit', resolve));
  for (let i = 0; i < 500 && !fs.existsSync(path.join(mnt, '.capsulefs-control')); ++i) {
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  assert.ok(fs.existsSync(path.join(mnt, '.capsulefs-control')), 'the mount did not come up');
  const N = 30;
  try {
    // The server is given the mountpoint: it finds the folder behind it, and reads the live notes.
    fs.writeFileSync(path.join(mnt, 'memory/working_memory.md'), '# Live notes\n');
    const {client} = await connect(mnt, 'e2e-racer');
    try {
      const notes = await client.readResource({uri: 'capsule://racer/notes'});
      assert.equal(notes.contents[0].text, '# Live notes\n');
      const viaMcp = (async () => {
        for (let i = 0; i < N; ++i) await ok(client, 'history_append', {role: 'user', content: `mcp ${i}`});
      })();
      const viaLog = (async () => {
        for (let i = 0; i < N; i += 5) {
          await Promise.all([0, 1, 2, 3, 4].map((j) => new Promise((resolve, reject) => {
            const child = spawn(CAPSULE, ['log', 'append', dir, '--type', 'user_message', '--data',
              JSON.stringify({text: `log ${i + j}`})], {stdio: 'ignore'});
            child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`log append exited ${code}`))));
          })));
        }
      })();
      const viaMount = (async () => {
        for (let i = 0; i < N; ++i) {
          await fs.promises.appendFile(path.join(mnt, 'memory/timeline_events.jsonl'),
              JSON.stringify({type: 'user_message', data: {text: `mount ${i}`}}) + '\n');
        }
      })();
      await Promise.all([viaMcp, viaLog, viaMount]);

      const all = (await ok(client, 'history_load', {limit: 1000})).messages;
      assert.equal(all.length, 3 * N);
      assert.deepEqual(all.map((m) => m.seq), Array.from({length: 3 * N}, (_, i) => i + 1));
      for (const source of ['mcp', 'log', 'mount']) {
        const texts = all.map((m) => m.content).filter((text) => text.startsWith(`${source} `)).sort();
        assert.deepEqual(texts, Array.from({length: N}, (_, i) => `${source} ${i}`).sort(), source);
      }
    } finally {
      await client.close();
    }
  } finally {
    run('fusermount3', ['-u', mnt]);
    await exited;
  }
  // Every line whole, every chain intact, and the folder verifies after the unmount.
  const events = capsule('log', dir, '--json').trim().split('\n');
  assert.equal(events.length, 3 * N);
  assert.match(capsule('verify', dir), /^ok/);
});

// The MCP Inspector's command line, pinned in package.json: tools/list with --strict, its check
// that every tool schema is portable to clients with narrower schema dialects (no bare true or
// false where a schema object is expected, no type lists, no remote $ref, no schema that
// constrains nothing). It exits 6 on an error-severity finding and prints every finding, warnings
// included, on standard error; the server must give none.
test('the MCP Inspector finds every tool schema portable (--strict)', () => {
  const dir = newCapsule('inspected');
  const inspector = path.join(HERE, 'node_modules/@modelcontextprotocol/inspector');
  const version = JSON.parse(fs.readFileSync(path.join(inspector, 'package.json'), 'utf8')).version;
  const home = fs.mkdtempSync(path.join(ROOT, 'inspector-home-'));
  const result = spawnSync(process.execPath,
      [path.join(inspector, 'clients/cli/build/index.js'), '--method', 'tools/list', '--strict', CAPSULE, 'mcp', dir],
      {encoding: 'utf8', env: {...process.env, HOME: home, MCP_CATALOG_PATH: path.join(home, 'mcp.json')}, timeout: 30000});
  assert.equal(result.status, 0, `inspector ${version} --strict: exit ${result.status}\n${result.stderr}`);
  assert.doesNotMatch(result.stderr, /Error:|Warning:|portability/, `inspector ${version}: ${result.stderr}`);
  assert.deepEqual(JSON.parse(result.stdout).tools.map((tool) => tool.name), TOOLS);
});

after(() => fs.rmSync(ROOT, {recursive: true, force: true}));
