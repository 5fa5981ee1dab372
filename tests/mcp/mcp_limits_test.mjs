// `capsule mcp` at its limits through the official MCP TypeScript SDK's client, with the SDK's
// default read buffer (STDIO_DEFAULT_MAX_BUFFER_SIZE, 10 MiB a line): a 12 MB message (within
// a journal event's 16 MiB) appended and read back whole, through pages and parts, with every
// reply line within the buffer, the connection kept and every committed write acknowledged;
// and requests refused at the line level answered to their id, so the SDK's call gets its
// error at once instead of waiting for its timeout.
//
//   node tests/mcp/mcp_limits_test.mjs CAPSULE CAPSULEFS
//
// Bazel runs it as //tests:mcp_limits_test; tests/setup.sh installs the client (npm ci).
import assert from 'node:assert/strict';
import {spawnSync} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {after, test} from 'node:test';

import {Client} from '@modelcontextprotocol/sdk/client/index.js';
import {StdioClientTransport} from '@modelcontextprotocol/sdk/client/stdio.js';
import {STDIO_DEFAULT_MAX_BUFFER_SIZE} from '@modelcontextprotocol/sdk/shared/stdio.js';
import {ErrorCode, McpError} from '@modelcontextprotocol/sdk/types.js';

const CAPSULE = path.resolve(process.argv[2] ?? 'bazel-bin/capsule');
const ROOT = fs.mkdtempSync(path.join(process.env.TEST_TMPDIR ?? os.tmpdir(), 'mcp-limits-'));

function newCapsule(name) {
  const dir = path.join(ROOT, name);
  const made = spawnSync(CAPSULE, ['init', dir, '--id', name, '--name', `Agent ${name}`], {encoding: 'utf8'});
  assert.equal(made.status, 0, made.stderr);
  return dir;
}

function journalIds(dir) {
  const out = spawnSync(CAPSULE, ['log', dir, '--json'], {encoding: 'utf8', maxBuffer: 256 << 20});
  assert.equal(out.status, 0, out.stderr);
  return out.stdout.trim().split('\n').filter(Boolean).map((line) => JSON.parse(line).id);
}

// A client as a framework makes one: the SDK's defaults (no maxBufferSize given). It records
// the longest line the server wrote, every error the client saw, and whether the connection
// closed.
async function connect(dir) {
  const transport = new StdioClientTransport({command: CAPSULE, args: ['mcp', dir], stderr: 'pipe'});
  const client = new Client({name: 'limits', version: '1.0.0'});
  const seen = {errors: [], closed: false, longest: 0, partial: 0};
  client.onerror = (error) => seen.errors.push(error);
  client.onclose = () => { seen.closed = true; };
  await client.connect(transport);
  transport._process.stdout.on('data', (chunk) => {
    for (let from = 0; ;) {
      const newline = chunk.indexOf(10, from);
      if (newline < 0) {
        seen.partial += chunk.length - from;
        break;
      }
      seen.longest = Math.max(seen.longest, seen.partial + newline - from);
      seen.partial = 0;
      from = newline + 1;
    }
  });
  return {client, seen};
}

const json = (result) => {
  assert.ok(!result.isError, JSON.stringify(result.content).slice(0, 500));
  return JSON.parse(result.content[0].text);
};

test('a 12 MB message through the SDK with its default buffer: acknowledged, read back whole, nothing lost', async () => {
  assert.equal(STDIO_DEFAULT_MAX_BUFFER_SIZE, 10 * 1024 * 1024);  // the buffer the issue is about
  const dir = newCapsule('big');
  const {client, seen} = await connect(dir);
  const acknowledged = [];
  const append = async (content) => {
    const {message} = json(await client.callTool({name: 'history_append', arguments: {role: 'user', content}}));
    acknowledged.push(message.id);
    return message;
  };
  // 12 MB of text with characters JSON escapes and some that are not ASCII.
  const unit = 'Le rapport trimestriel "complet", été 2026.\n';
  const big = unit.repeat(Math.ceil(12e6 / Buffer.byteLength(unit))).slice(0, 12e6 - 3) + 'fin';
  const bytes = Buffer.byteLength(big);
  assert.ok(bytes > 12e6 && bytes < 16 * 1024 * 1024, `${bytes}`);
  try {
    await append('before');
    const stored = await append(big);
    await append('after');
    assert.equal(stored.content_cut.bytes, bytes);
    assert.ok(big.startsWith(stored.content));
    assert.equal(stored.content_cut.uri, `capsule://big/messages/${stored.id}`);

    // history_load: the latest page, and the one before through its cursor, the big message cut.
    const one = json(await client.callTool({name: 'history_load', arguments: {limit: 1}}));
    assert.deepEqual(one.messages.map((m) => m.content), ['after']);
    const seqs = [];
    let cursor = null;
    do {
      const page = json(await client.callTool({name: 'history_load',
        arguments: cursor === null ? {limit: 1000} : {limit: 1000, before_seq: cursor}}));
      seqs.unshift(...page.messages.map((m) => m.seq));
      for (const m of page.messages) if (m.seq === 2) assert.deepEqual(m.content_cut, stored.content_cut);
      cursor = page.next_before_seq;
    } while (cursor !== null);
    assert.deepEqual(seqs, [1, 2, 3]);

    // The whole content, in parts, byte for byte; and the conversation resource.
    let whole = '';
    for (let k = 0; k < stored.content_cut.parts; ++k) {
      const part = (await client.readResource({uri: `${stored.content_cut.uri}?part=${k}`})).contents[0];
      assert.equal(part._meta['capsule/part'], k);
      whole += part.text;
    }
    assert.equal(whole.length, big.length);
    assert.ok(whole === big, 'the parts joined are not the message');
    const conversation = JSON.parse((await client.readResource({uri: 'capsule://big/conversations/main'})).contents[0].text);
    assert.deepEqual(conversation.messages.map((m) => m.seq), [1, 2, 3]);

    await client.ping();
    assert.equal(seen.closed, false, 'the connection closed');
    assert.deepEqual(seen.errors, []);
    assert.ok(seen.longest > 0 && seen.longest <= 1024 * 1024, `a reply line of ${seen.longest} bytes`);
  } finally {
    await client.close();
  }
  // Every write the journal committed was acknowledged to the client, each once.
  assert.deepEqual(journalIds(dir), acknowledged);
});

test('requests refused at the line level get their error through the SDK, not a timeout', async () => {
  const dir = newCapsule('refused');
  const {client, seen} = await connect(dir);
  try {
    const cases = [
      ['a lone surrogate escape', {role: 'user', content: 'a \ud800 b'}],
      ['nesting over the limit', {role: 'user', content: 'x', deep: JSON.parse('['.repeat(300) + ']'.repeat(300))}],
      ['an integer over 64 bits', {role: 'user', content: 'x', n: 18446744073709552000}],
    ];
    for (const [what, args] of cases) {
      const started = Date.now();
      await assert.rejects(client.callTool({name: 'history_append', arguments: args}, undefined, {timeout: 60000}),
          (error) => {
            assert.ok(error instanceof McpError, `${what}: ${error}`);
            assert.equal(error.code, ErrorCode.ParseError, what);
            assert.doesNotMatch(error.message, /timed out/i, what);
            return true;
          });
      assert.ok(Date.now() - started < 10000, `${what}: answered after ${Date.now() - started} ms`);
    }
    await client.ping();
    assert.equal(seen.closed, false);
    assert.deepEqual(seen.errors, []);  // every reply matched its request
  } finally {
    await client.close();
  }
  assert.deepEqual(journalIds(dir), []);  // nothing of them written
});

after(() => fs.rmSync(ROOT, {recursive: true, force: true}));
