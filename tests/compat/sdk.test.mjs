// The official Cloudflare Sandbox SDK client (@cloudflare/sandbox's
// SandboxClient, route-based HTTP transport) driving a running sbx stack
// through /v1/sandboxes/{id}/cf (docs/COMPAT.md). Run by
// tests/integration/test_compat.py, or by hand:
//   SBX_URL=http://127.0.0.1:PORT SBX_API_KEY=sbx_… SBX_SANDBOX_ID=… \
//     node --import ./register-standin.mjs --test sdk.test.mjs
// The sandbox must exist (PUT /v1/sandboxes/{id}) and start empty.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { CodeInterpreter, SandboxClient, collectFile, parseSSEStream } from '@cloudflare/sandbox';

const { SBX_URL, SBX_API_KEY, SBX_SANDBOX_ID } = process.env;
assert.ok(SBX_URL && SBX_API_KEY && SBX_SANDBOX_ID, 'SBX_URL, SBX_API_KEY and SBX_SANDBOX_ID are required');

// Exactly the migration snippet of docs/COMPAT.md.
const client = new SandboxClient({
  baseUrl: `${SBX_URL}/v1/sandboxes/${SBX_SANDBOX_ID}/cf`,
  defaultHeaders: { Authorization: `Bearer ${SBX_API_KEY}` },
  retryTimeoutMs: 10_000,
});

async function events(stream) {
  const out = [];
  for await (const ev of parseSSEStream(stream)) out.push(ev);
  return out;
}

// The SDK does not export most of its error classes: check the class by
// name, and that it wraps the error object the SDK parsed from our answer.
async function rejectsWith(promise, name, code) {
  await assert.rejects(promise, (err) => {
    assert.equal(err?.name, name, `expected ${name}, got ${err?.name}: ${err?.message}`);
    assert.equal(err.code, code);
    assert.equal(typeof err.errorResponse?.timestamp, 'string');
    assert.equal(err.httpStatus, err.errorResponse.httpStatus);
    return true;
  });
}

test('ping and version', async () => {
  assert.equal(await client.utils.ping(), 'pong');
  // the container API version served (the SDK's), not sbx's own
  assert.equal(await client.utils.getVersion(), '0.12.10');
});

test('getCommands lists the executables of the image', async () => {
  const cmds = await client.utils.getCommands();
  assert.ok(Array.isArray(cmds));
  for (const c of ['sh', 'ls', 'cat']) assert.ok(cmds.includes(c), `${c} missing from ${cmds.length} commands`);
  assert.equal(new Set(cmds).size, cmds.length);
});

test('no sessionId: the default session, created on first use, persists', async () => {
  await client.commands.execute('cd /tmp && export COMPAT_DEF=kept', undefined);
  const r = await client.commands.execute('pwd; echo $COMPAT_DEF', undefined);
  assert.equal(r.stdout, '/tmp\nkept\n');
  assert.equal(r.sessionId, 'default');
  // __DISABLE_SESSION__ (enableDefaultSession: false) runs sessionless: nothing persists
  await client.commands.execute('cd /tmp && export COMPAT_NONE=lost', '__DISABLE_SESSION__');
  const n = await client.commands.execute('pwd; echo ${COMPAT_NONE:-none}', '__DISABLE_SESSION__');
  assert.equal(n.stdout, '/workspace\nnone\n');
  assert.equal(n.sessionId, undefined);
  await client.commands.execute('cd /workspace', undefined);
});

test('timeouts as Cloudflare reports them', async () => {
  // in a session: CommandError (500 COMMAND_EXECUTION_ERROR)
  const err = await client.commands.execute('sleep 5', 'compat-tmo', { timeoutMs: 300 }).catch((e) => e);
  assert.equal(err?.name, 'CommandError', `got ${err?.name}: ${err?.message}`);
  assert.equal(err.code, 'COMMAND_EXECUTION_ERROR');
  assert.equal(err.httpStatus, 500);
  assert.match(err.message, /Command timeout after 300 ms/);
  // sessionless: exit code 124 and the note on stderr
  const r = await client.commands.execute('echo before >&2; sleep 5', '__DISABLE_SESSION__', { timeoutMs: 300 });
  assert.equal(r.exitCode, 124);
  assert.equal(r.success, false);
  assert.match(r.stderr, /^before\n/);
  assert.match(r.stderr, /Command timed out after 300ms/);
});

test('execute: output, exit code, env and cwd', async () => {
  const r = await client.commands.execute('echo out; echo err >&2; exit 3', '__DISABLE_SESSION__');
  assert.equal(r.success, false);
  assert.equal(r.exitCode, 3);
  assert.equal(r.stdout, 'out\n');
  assert.equal(r.stderr, 'err\n');
  assert.equal(r.command, 'echo out; echo err >&2; exit 3');
  assert.equal(typeof r.timestamp, 'string');

  const e = await client.commands.execute('echo "$GREETING"; pwd', '__DISABLE_SESSION__', {
    env: { GREETING: 'hello' },
    cwd: '/tmp',
  });
  assert.equal(e.success, true);
  assert.equal(e.stdout, 'hello\n/tmp\n');
});

test('execute in a session keeps shell state (session created on first use)', async () => {
  await client.commands.execute('cd /tmp && export COMPAT_VAR=kept', 'compat-s1');
  const r = await client.commands.execute('pwd; echo $COMPAT_VAR', 'compat-s1');
  assert.equal(r.stdout, '/tmp\nkept\n');
  assert.equal(r.sessionId, 'compat-s1');
  const other = await client.commands.execute('pwd; echo ${COMPAT_VAR:-none}', 'compat-s2');
  assert.equal(other.stdout, '/workspace\nnone\n');
});

test('executeStream: start, stdout/stderr in order, complete', async () => {
  const evs = await events(
    await client.commands.executeStream('echo one; sleep 0.2; echo two >&2; (exit 4)', 'compat-s1'),
  );
  const types = evs.map((e) => e.type);
  assert.equal(types[0], 'start');
  assert.equal(types.at(-1), 'complete');
  assert.equal(evs.at(-1).exitCode, 4);
  const out = evs.filter((e) => e.type === 'stdout').map((e) => e.data).join('');
  const err = evs.filter((e) => e.type === 'stderr').map((e) => e.data).join('');
  assert.equal(out, 'one\n');
  assert.equal(err, 'two\n');
  assert.ok(types.indexOf('stdout') < types.indexOf('stderr'));
});

test('executeStream in a session runs in a subshell of it', async () => {
  // compat-s1 is in /tmp with COMPAT_VAR (the session test above)
  const evs = await events(
    await client.commands.executeStream('pwd; echo $COMPAT_VAR; cd /; export COMPAT_SUB=x; exit 4', 'compat-s1'),
  );
  assert.equal(evs.at(-1).type, 'complete');
  assert.equal(evs.at(-1).exitCode, 4);
  assert.equal(evs.filter((e) => e.type === 'stdout').map((e) => e.data).join(''), '/tmp\nkept\n');
  // the shell lives on, without the stream's cd and export
  const r = await client.commands.execute('pwd; echo ${COMPAT_SUB:-none}; echo $COMPAT_VAR', 'compat-s1');
  assert.equal(r.exitCode, 0);
  assert.equal(r.stdout, '/tmp\nnone\nkept\n');
});

test('files: write, read, exists, list, rename, move, stream, delete', async () => {
  const f = client.files;
  await f.mkdir('/workspace/compat/sub', undefined, { recursive: true });
  const w = await f.writeFile('/workspace/compat/a.txt', 'héllo\nworld\n', undefined);
  assert.equal(w.success, true);

  const r = await f.readFile('/workspace/compat/a.txt', undefined);
  assert.equal(r.content, 'héllo\nworld\n');
  assert.equal(r.encoding, 'utf-8');
  assert.equal(r.isBinary, false);
  assert.equal(r.size, Buffer.byteLength('héllo\nworld\n'));

  const bytes = Buffer.from([0, 1, 2, 250, 255, 10]);
  await f.writeFile('relative.bin', bytes.toString('base64'), undefined, { encoding: 'base64' });
  const b = await f.readFile('/workspace/relative.bin', undefined);
  assert.equal(b.encoding, 'base64');
  assert.equal(b.isBinary, true);
  assert.deepEqual(Buffer.from(b.content, 'base64'), bytes);
  const streamed = await collectFile(await f.readFileStream('/workspace/relative.bin', undefined));
  assert.equal(streamed.metadata.isBinary, true);
  assert.deepEqual(Buffer.from(streamed.content), bytes);

  assert.equal((await f.exists('/workspace/compat/a.txt', undefined)).exists, true);
  assert.equal((await f.exists('/workspace/compat/nope', undefined)).exists, false);

  const list = await f.listFiles('/workspace/compat', undefined, { recursive: true });
  const names = list.files.map((x) => x.relativePath).sort();
  assert.deepEqual(names, ['a.txt', 'sub']);
  const a = list.files.find((x) => x.name === 'a.txt');
  assert.equal(a.type, 'file');
  assert.equal(a.absolutePath, '/workspace/compat/a.txt');
  assert.equal(list.count, 2);

  await f.renameFile('/workspace/compat/a.txt', '/workspace/compat/b.txt', undefined);
  await f.moveFile('/workspace/compat/b.txt', '/workspace/compat/sub/c.txt', undefined);
  const text = await collectFile(await f.readFileStream('/workspace/compat/sub/c.txt', undefined));
  assert.equal(text.content, 'héllo\nworld\n');
  assert.equal(text.metadata.encoding, 'utf-8');

  await f.deleteFile('/workspace/compat/sub/c.txt', undefined);
  assert.equal((await f.exists('/workspace/compat/sub/c.txt', undefined)).exists, false);
  // The shell sees the same files.
  const ls = await client.commands.execute('ls /workspace/compat', undefined);
  assert.equal(ls.stdout, 'sub\n');
});

test('sizes: 20 MiB round trip, FILE_TOO_LARGE beyond 32 MiB, nginx refusals in the SDK shape', async () => {
  const f = client.files;
  const line = 'sbx compat size test 0123456789 ü\n';
  const big = line.repeat(Math.ceil((20 << 20) / Buffer.byteLength(line)));
  await f.writeFile('/workspace/big.txt', big, undefined);
  const back = await f.readFile('/workspace/big.txt', undefined);
  assert.equal(back.size, Buffer.byteLength(big));
  assert.ok(back.content === big, 'the 20 MiB text came back changed');

  // 40 MiB of content: over Cloudflare's 32 MiB, refused by the agent
  const tooBig = 'y'.repeat(40 << 20);
  const w = await f.writeFile('/workspace/too-big.txt', tooBig, undefined).catch((e) => e);
  assert.equal(w?.name, 'FileTooLargeError', `got ${w?.name}: ${w?.message}`);
  assert.equal(w.httpStatus, 413);
  assert.match(w.message, /content/);
  // a body over nginx's bound for /cf: nginx's own 413, in the SDK's shape
  const huge = await f.writeFile('/workspace/huge.txt', 'z'.repeat(50 << 20), undefined).catch((e) => e);
  assert.equal(huge?.name, 'FileTooLargeError', `got ${huge?.name}: ${huge?.message}`);
  assert.equal(huge.httpStatus, 413);
  assert.equal(typeof huge.errorResponse.timestamp, 'string');
  // a file over 32 MiB is not read whole (readFileStream streams it)
  await client.commands.execute('head -c 34000000 /dev/zero > /workspace/zeros.bin', undefined);
  await rejectsWith(f.readFile('/workspace/zeros.bin', undefined), 'FileTooLargeError', 'FILE_TOO_LARGE');
  await client.commands.execute('rm -f /workspace/big.txt /workspace/zeros.bin', undefined);
  // large output of execute comes back whole (streamed from the agent's spill file)
  const out = await client.commands.execute('yes é | head -c 8388608', '__DISABLE_SESSION__');
  assert.equal(out.exitCode, 0);
  assert.ok(out.stdout === 'é\n'.repeat(Math.floor(8388608 / 3)) + 'é', 'the 8 MiB output came back changed');
  assert.equal(out.command, 'yes é | head -c 8388608');
});

test('errors carry the SDK error classes and codes', async () => {
  await rejectsWith(client.files.readFile('/workspace/missing.txt', undefined), 'FileNotFoundError', 'FILE_NOT_FOUND');
  const err = await client.files.readFile('/workspace/missing.txt', undefined).catch((e) => e);
  assert.equal(err.httpStatus, 404);
  assert.equal(err.path, '/workspace/missing.txt');
  await rejectsWith(client.processes.getProcess('no-such-proc'), 'ProcessNotFoundError', 'PROCESS_NOT_FOUND');
  await rejectsWith(client.files.readFile('/workspace/../etc/passwd', undefined), 'ValidationFailedError', 'VALIDATION_FAILED');
  await rejectsWith(client.watch.checkChanges({ path: '/workspace' }), 'SandboxError', 'NOT_FOUND');
  // Directories: missing, a directory where a file is expected, a file where a directory is.
  await rejectsWith(client.files.listFiles('/workspace/no-such-dir', undefined), 'FileNotFoundError', 'FILE_NOT_FOUND');
  await client.files.mkdir('/workspace/errdir', undefined, { recursive: true });
  await rejectsWith(client.files.readFile('/workspace/errdir', undefined), 'FileSystemError', 'IS_DIRECTORY');
  await client.files.writeFile('/workspace/errfile', 'x', undefined);
  await rejectsWith(client.files.listFiles('/workspace/errfile', undefined), 'FileSystemError', 'NOT_DIRECTORY');
});

test('processes: start, list, get, logs, stream, kill', async () => {
  const p = client.processes;
  const started = await p.startProcess('for i in 1 2 3; do echo tick$i; sleep 0.1; done; echo done >&2', undefined, {
    processId: 'compat-ticker',
  });
  assert.equal(started.processId, 'compat-ticker');
  assert.equal(typeof started.pid, 'number');

  const listed = await p.listProcesses();
  assert.ok(listed.processes.some((x) => x.id === 'compat-ticker'));

  const evs = await events(await p.streamProcessLogs('compat-ticker'));
  assert.equal(evs.at(-1).type, 'exit');
  assert.equal(evs.at(-1).exitCode, 0);
  assert.equal(evs.filter((e) => e.type === 'stdout').map((e) => e.data).join(''), 'tick1\ntick2\ntick3\n');

  const info = await p.getProcess('compat-ticker');
  assert.equal(info.process.status, 'completed');
  assert.equal(info.process.exitCode, 0);
  const logs = await p.getProcessLogs('compat-ticker');
  assert.equal(logs.stdout, 'tick1\ntick2\ntick3\n');
  assert.equal(logs.stderr, 'done\n');
});

test('a process started in a session starts from its cwd and env', async () => {
  await client.commands.execute('mkdir -p /tmp/psess && cd /tmp/psess && export COMPAT_PV=sess', 'compat-p');
  const cmd = 'pwd; echo $COMPAT_PV; echo $OWN';
  const started = await client.processes.startProcess(cmd, 'compat-p', {
    processId: 'compat-in-session',
    env: { OWN: 'mine' },
  });
  assert.equal(started.processId, 'compat-in-session');
  const evs = await events(await client.processes.streamProcessLogs('compat-in-session'));
  assert.equal(evs[0].type, 'process_info');
  assert.equal(evs[0].command, cmd);
  assert.equal(evs.at(-1).type, 'exit');
  assert.equal(evs.filter((e) => e.type === 'stdout').map((e) => e.data).join(''), '/tmp/psess\nsess\nmine\n');
  const info = await client.processes.getProcess('compat-in-session');
  assert.equal(info.process.command, cmd);
});

// Answers 503 to its first three requests, then 200 on /health.
const SLOW_HEALTH = `
import http.server
n = [0]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        n[0] += 1
        code = 200 if n[0] > 3 and self.path == '/health' else 503
        print(code, flush=True)
        self.send_response(code)
        self.send_header('Content-Length', '0')
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(('127.0.0.1', 8790), H).serve_forever()
`;

test('ports.watchPort: HTTP until a 200, TCP, a process that exits first', async () => {
  const p = client.processes;
  await client.files.writeFile('/workspace/slow_health.py', SLOW_HEALTH, undefined);
  await p.startProcess('python3 /workspace/slow_health.py', undefined, { processId: 'compat-health' });
  // what the SDK's waitForPort sends
  const http = await events(await client.ports.watchPort({
    port: 8790, mode: 'http', path: '/health', statusMin: 200, statusMax: 299,
    processId: 'compat-health', interval: 50,
  }));
  assert.deepEqual(http.map((e) => e.type), ['watching', 'ready']);
  assert.equal(http[1].statusCode, 200);
  const served = (await p.getProcessLogs('compat-health')).stdout.split('\n');
  assert.deepEqual(served.slice(0, 4), ['503', '503', '503', '200']);
  await p.killProcess('compat-health');

  await p.startProcess(`python3 -c "import socket,time
s=socket.socket(); time.sleep(0.3); s.bind(('127.0.0.1',8791)); s.listen(4); time.sleep(60)"`,
  undefined, { processId: 'compat-listener' });
  const tcp = await events(await client.ports.watchPort({ port: 8791, mode: 'tcp', processId: 'compat-listener', interval: 50 }));
  assert.deepEqual(tcp.map((e) => e.type), ['watching', 'ready']);
  await p.killProcess('compat-listener');

  await p.startProcess('sleep 0.2; exit 3', undefined, { processId: 'compat-quitter' });
  const gone = await events(await client.ports.watchPort({ port: 8792, mode: 'tcp', processId: 'compat-quitter' }));
  assert.equal(gone.at(-1).type, 'process_exited');
  assert.equal(gone.at(-1).exitCode, 3);
  await rejectsWith(client.ports.watchPort({ port: 8792, mode: 'tcp', processId: 'no-such-proc' }),
    'ProcessNotFoundError', 'PROCESS_NOT_FOUND');
});

test('processes: kill one, kill all, background execute', async () => {
  const p = client.processes;
  await p.startProcess('sleep 300', undefined, { processId: 'compat-sleeper' });
  const killed = await p.killProcess('compat-sleeper');
  assert.equal(killed.success, true);
  const after = await p.getProcess('compat-sleeper');
  assert.notEqual(after.process.status, 'running');

  await p.startProcess('sleep 300', undefined, { processId: 'compat-a' });
  await p.startProcess('sleep 300', undefined, { processId: 'compat-b' });
  const all = await p.killAllProcesses();
  assert.ok(all.cleanedCount >= 2);

  const res = await fetch(`${SBX_URL}/v1/sandboxes/${SBX_SANDBOX_ID}/cf/api/execute`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${SBX_API_KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ command: 'sleep 300', background: true }),
  });
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.equal(body.success, true);
  assert.equal(typeof body.processId, 'string');
  await p.killProcess(body.processId);
});

test('sessions: create with env and cwd, duplicate, delete', async () => {
  const u = client.utils;
  const s = await u.createSession({ id: 'compat-made', env: { MADE: 'yes' }, cwd: '/tmp' });
  assert.equal(s.success, true);
  assert.equal(s.id, 'compat-made');
  const r = await client.commands.execute('pwd; echo $MADE', 'compat-made');
  assert.equal(r.stdout, '/tmp\nyes\n');
  await rejectsWith(u.createSession({ id: 'compat-made' }), 'SessionAlreadyExistsError', 'SESSION_ALREADY_EXISTS');
  const d = await u.deleteSession('compat-made');
  assert.equal(d.sessionId, 'compat-made');
  // Used again: a fresh session with the defaults.
  const again = await client.commands.execute('pwd; echo ${MADE:-none}', 'compat-made');
  assert.equal(again.stdout, '/workspace\nnone\n');
});

test('interpreter: contexts, runCode with results and errors, runCodeStream', async () => {
  const interp = new CodeInterpreter(client.interpreter);
  const ctx = await interp.createCodeContext({ language: 'python' });
  assert.equal(ctx.language, 'python');
  assert.equal(ctx.cwd, '/workspace');
  assert.ok(ctx.createdAt instanceof Date);

  await interp.runCode('x = 6', { context: ctx });
  const r = await interp.runCode("print('hi')\nimport pandas as pd\npd.DataFrame({'a': [x * 7]})",
    { context: ctx });
  assert.deepEqual(r.logs.stdout, ['hi', '\n']);
  assert.equal(r.results.length, 1);
  assert.match(r.results[0].html, /<table/);
  assert.match(r.results[0].text, /42/);
  assert.ok(r.results[0].formats().includes('html'));

  const plot = await interp.runCode(
    'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3]); None', { context: ctx });
  assert.equal(plot.results.length, 1);
  assert.equal(Buffer.from(plot.results[0].png, 'base64').subarray(1, 4).toString(), 'PNG');

  const bad = await interp.runCode('1 / 0', { context: ctx });
  assert.equal(bad.error.name, 'ZeroDivisionError');
  assert.equal(bad.error.message, 'division by zero');
  assert.ok(bad.error.traceback.length > 0);

  const evs = await events(await interp.runCodeStream('print(x)\nx + 1', { context: ctx }));
  assert.deepEqual(evs.map((e) => e.type), ['stdout', 'stdout', 'result', 'execution_complete']);
  assert.equal(evs[0].text, '6');
  assert.equal(evs[2].data['text/plain'], '7');

  const js = await interp.createCodeContext({ language: 'javascript' });
  const j = await interp.runCode('const v = await Promise.resolve(2)\nv * 21', { context: js });
  assert.equal(j.results[0].text, '42');

  const ids = (await interp.listCodeContexts()).map((c) => c.id);
  assert.ok(ids.includes(ctx.id) && ids.includes(js.id));
  await interp.deleteCodeContext(js.id);
  assert.ok(!(await interp.listCodeContexts()).some((c) => c.id === js.id));
  await rejectsWith(client.interpreter.deleteCodeContext(js.id), 'ContextNotFoundError', 'CONTEXT_NOT_FOUND');
});

test('watch: watching first, then create, modify, move and delete events', async () => {
  await client.commands.execute('mkdir -p /workspace/cfw', undefined);
  const stream = await client.watch.watch({ path: '/workspace/cfw', recursive: true });
  const seen = [];
  const ac = new AbortController();
  const reading = (async () => {
    for await (const ev of parseSSEStream(stream, ac.signal)) {
      seen.push(ev);
      if (ev.type === 'event' && ev.eventType === 'delete') break;
    }
  })();
  const step = (cmd) => client.commands.execute(cmd, undefined);
  const until = async (pred) => {
    for (let i = 0; i < 100 && !seen.some(pred); i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(seen.some(pred), `no such event in ${JSON.stringify(seen)}`);
  };
  await until((e) => e.type === 'watching');
  assert.equal(seen[0].type, 'watching');
  assert.equal(seen[0].path, '/workspace/cfw');
  assert.equal(typeof seen[0].watchId, 'string');
  await step('echo a > /workspace/cfw/x');
  await until((e) => e.eventType === 'create' && e.path === '/workspace/cfw/x');
  await step('echo b >> /workspace/cfw/x');
  await until((e) => e.eventType === 'modify' && e.path === '/workspace/cfw/x');
  await step('mv /workspace/cfw/x /workspace/cfw/y');
  await until((e) => e.eventType === 'move_to' && e.path === '/workspace/cfw/y');
  assert.ok(seen.some((e) => e.eventType === 'move_from' && e.path === '/workspace/cfw/x'));
  await step('rm /workspace/cfw/y');
  await reading;
  const del = seen.at(-1);
  assert.equal(del.path, '/workspace/cfw/y');
  assert.equal(del.isDirectory, false);
  assert.equal(typeof del.timestamp, 'string');
  ac.abort();
});

test('git checkout: clone a branch, and the SDK error classes', async () => {
  const made = await client.commands.execute(
    'set -e; g() { git -c user.name=t -c user.email=t@e -c init.defaultBranch=main "$@"; };' +
      ' g init -q --bare /tmp/cfsrc.git; g init -q /tmp/cfw2; cd /tmp/cfw2; echo 1 > f; g add f;' +
      ' g commit -qm one; g checkout -qb dev; echo d > d; g add d; g commit -qm dev;' +
      ' g push -q /tmp/cfsrc.git main dev',
    undefined,
  );
  assert.equal(made.exitCode, 0, made.stderr);
  const r = await client.git.checkout('file:///tmp/cfsrc.git', undefined, {
    branch: 'dev',
    targetDir: '/workspace/cfclone',
    depth: 1,
  });
  assert.equal(r.success, true);
  assert.equal(r.branch, 'dev');
  assert.equal(r.repoUrl, 'file:///tmp/cfsrc.git');
  assert.equal(r.targetDir, '/workspace/cfclone');
  const d = await client.commands.execute('cat /workspace/cfclone/d', undefined);
  assert.equal(d.stdout, 'd\n');
  await rejectsWith(
    client.git.checkout('file:///tmp/none.git', undefined, { targetDir: '/tmp/cfnone' }),
    'GitRepositoryNotFoundError',
    'GIT_REPOSITORY_NOT_FOUND',
  );
  await rejectsWith(
    client.git.checkout('file:///tmp/cfsrc.git', undefined, { branch: 'nope', targetDir: '/tmp/cfnb' }),
    'GitBranchNotFoundError',
    'GIT_BRANCH_NOT_FOUND',
  );
});
