// memory_search through the official MCP TypeScript SDK's client over stdio: words, soft
// expiry, kinds, a vector within one model, both fused; the same results `capsule search`
// gives; refusals as tool errors after which the server still answers.
//
//   node tests/mcp/mcp_search_test.mjs CAPSULE CAPSULEFS
//
// Bazel runs it as //tests:mcp_search_test; tests/setup.sh installs the client (npm ci).
import assert from 'node:assert/strict';
import {spawnSync} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {test} from 'node:test';

import {Client} from '@modelcontextprotocol/sdk/client/index.js';
import {StdioClientTransport} from '@modelcontextprotocol/sdk/client/stdio.js';

const CAPSULE = path.resolve(process.argv[2] ?? 'bazel-bin/capsule');
const ROOT = fs.mkdtempSync(path.join(process.env.TEST_TMPDIR ?? os.tmpdir(), 'mcp-search-'));

function capsule(args, input) {
  const result = spawnSync(CAPSULE, args, {input, encoding: 'utf8'});
  assert.equal(result.status, 0, `capsule ${args.join(' ')}: ${result.stderr}`);
  return result.stdout;
}

const append = (dir, type, data) => capsule(['log', 'append', dir, '--type', type, '--data', JSON.stringify(data)]).trim();

async function ok(client, args) {
  const result = await client.callTool({name: 'memory_search', arguments: args});
  assert.ok(!result.isError, `memory_search: ${JSON.stringify(result.content)}`);
  return JSON.parse(result.content[0].text).results;
}

async function refused(client, args) {
  const result = await client.callTool({name: 'memory_search', arguments: args});
  assert.equal(result.isError, true, `should have been refused: ${JSON.stringify(result)}`);
  return result.content[0].text;
}

test('memory_search: words, expiry, kinds, vectors of one model, hybrid, as capsule search', async () => {
  const dir = path.join(ROOT, 'searcher');
  capsule(['init', dir, '--id', 'searcher', '--name', 'Searcher']);
  fs.writeFileSync(path.join(dir, 'memory/working_memory.md'), '# Notes\n\nThe staging database is read-only on Fridays.\n');
  const fox = append(dir, 'user_message', {
    text: 'The report said the quick brown fox jumps over the lazy dog at noon.',
    embedding: {model: 'e3', dims: 3, vector: [1, 0, 0]},
  });
  const shuffled = append(dir, 'user_message', {
    text: 'fox brown quick fox fox brown quick quick fox brown',
    embedding: {model: 'e3', dims: 3, vector: [0, 1, 0]},
  });
  const other = append(dir, 'assistant_message', {
    text: 'Noted.', provider: 'anthropic', model: 'm-1', embedding: {model: 'other', dims: 3, vector: [0, 1, 0]},
  });

  const transport = new StdioClientTransport({command: CAPSULE, args: ['mcp', dir], stderr: 'pipe'});
  const client = new Client({name: 'search-test', version: '1.0.0'});
  await client.connect(transport);
  try {
    const {tools} = await client.listTools();
    const search = tools.find((tool) => tool.name === 'memory_search');
    assert.ok(search, 'memory_search listed');
    assert.equal(search.annotations.readOnlyHint, true);

    // Words from a message's middle; the exact phrase first.
    const middle = await ok(client, {query: 'jumps over'});
    assert.deepEqual(middle.map((hit) => hit.event_id), [fox]);
    assert.equal(middle[0].kind, 'message');
    assert.equal(middle[0].match, 'phrase');
    const phrase = await ok(client, {query: 'quick brown fox'});
    assert.deepEqual(phrase.map((hit) => hit.event_id), [fox, shuffled]);

    // A fact remembered through MCP, found with its provenance, then expired: gone unless all.
    const remembered = await client.callTool(
        {name: 'memory_remember', arguments: {subject: 'user', key: 'pet', value: 'a ferret named Biscuit', source: fox}});
    assert.ok(!remembered.isError, JSON.stringify(remembered.content));
    const fact = (await ok(client, {query: 'Biscuit', kinds: ['facts']}))[0];
    assert.equal(fact.kind, 'fact');
    assert.equal(fact.source, fox);
    assert.equal(fact.subject, 'user');
    assert.equal(fact.key, 'pet');
    const why = await client.callTool({name: 'memory_why', arguments: {subject: fact.subject, key: fact.key}});
    assert.equal(JSON.parse(why.content[0].text).fact.id, fact.event_id);
    const expired = await client.callTool({name: 'memory_expire', arguments: {subject: 'user', key: 'pet', source: other}});
    assert.ok(!expired.isError, JSON.stringify(expired.content));
    assert.deepEqual(await ok(client, {query: 'Biscuit'}), []);
    const all = await ok(client, {query: 'Biscuit', all: true});
    assert.deepEqual(all.map((hit) => hit.event_id), [fact.event_id]);
    assert.equal(typeof all[0].valid_to, 'string');

    // Notes, and kinds.
    const note = await ok(client, {query: 'Fridays'});
    assert.equal(note.length, 1);
    assert.equal(note[0].kind, 'note');
    assert.equal(note[0].source, 'memory/working_memory.md:3');
    assert.deepEqual(await ok(client, {query: 'Fridays', kinds: ['messages', 'facts']}), []);

    // A vector is compared with its model's vectors only; hybrid fuses the two rankings.
    const near = await ok(client, {vector: [0, 1, 0], model: 'e3', k: 5});
    assert.deepEqual(near.map((hit) => hit.event_id), [shuffled, fox]);
    assert.equal(near[0].match, 'vector');
    assert.deepEqual((await ok(client, {vector: [0, 1, 0], model: 'other'})).map((hit) => hit.event_id), [other]);
    const hybrid = await ok(client, {query: 'quick brown fox', vector: [0, 1, 0], model: 'e3'});
    assert.equal(hybrid[0].match, 'hybrid');
    assert.deepEqual(new Set(hybrid.map((hit) => hit.event_id)), new Set([fox, shuffled]));

    // The same answers as the command line.
    for (const args of [['quick brown fox'], ['Biscuit', '--all'], ['Fridays', '--kind', 'notes']]) {
      const cli = JSON.parse(capsule(['search', dir, ...args, '--json']));
      const query = {query: args[0], all: args.includes('--all')};
      if (args.includes('--kind')) query.kinds = ['notes'];
      assert.deepEqual(await ok(client, query), cli, args.join(' '));
    }
    const cliVector = JSON.parse(capsule(['search', dir, 'fox', '--vector', '-', '--model', 'e3', '--json'], '[0, 1, 0]'));
    assert.deepEqual(await ok(client, {query: 'fox', vector: [0, 1, 0], model: 'e3'}), cliVector);

    // Refusals: each a tool error naming what and why; the server answers on.
    assert.match(await refused(client, {vector: [1, 0], model: 'e3'}),
        /memory_search: the query vector: has 2 numbers; model e3's vectors have 3 dims/);
    assert.match(await refused(client, {vector: [1, 0, 0], model: 'nope'}),
        /memory_search: model nope: no event carries an embedding of it \(models here: e3 \(3 dims\), other \(3 dims\)\)/);
    assert.match(await refused(client, {vector: [1, 0, 0]}), /memory_search: the query vector: needs the embedding model that made it/);
    assert.match(await refused(client, {query: '?!'}), /memory_search: search: the query '\?!' holds no words/);
    assert.match(await refused(client, {query: 'fox', kinds: ['mail']}), /memory_search: arguments/);
    assert.match(await refused(client, {query: 'fox', k: 101}), /memory_search: arguments/);
    assert.equal((await ok(client, {query: 'noon'})).length, 1);
  } finally {
    await client.close();
  }
});
