// driver.js — the JavaScript and TypeScript side of a code context
// (agent_interp.c): one long-lived `node -e <this file> [typescript]`.
// The line protocol is driver.py's: {"code"} a line in; ready, stdout,
// stderr, result, error, end a line out. Code runs in one vm context, so
// globals persist; top-level await works (the code is then run inside an
// async function, and its top-level declarations become globals); the
// value of the last expression is the main result. TypeScript is stripped
// of its type syntax (stripTypes) before it runs. SIGINT interrupts a run.
'use strict';
const vm = require('vm');
const util = require('util');
const fs = require('fs');
const readline = require('readline');
const { createRequire } = require('module');

const typescript = process.argv.includes('typescript');
// fd 1 carries the protocol; what the code writes to process.stdout and
// process.stderr becomes events instead.
// fd 1 is non-blocking (node made it so): a full pipe (the client lags) is
// waited out 1 ms at a time. An interrupt may stop the code inside emit,
// half-way through a line: the next line then starts on a fresh one (the
// agent drops the cut one).
const nap = new Int32Array(new SharedArrayBuffer(4));
let cut = false;
function emit(obj) {
	const b = Buffer.from((cut ? '\n' : '') + JSON.stringify(obj) + '\n');
	cut = true;
	for (let off = 0; off < b.length;) {
		try {
			off += fs.writeSync(1, b, off);
		} catch (e) {
			if (e.code !== 'EAGAIN') throw e;
			Atomics.wait(nap, 0, 0, 1);
		}
	}
	cut = false;
}
for (const name of ['stdout', 'stderr'])
	process[name].write = (chunk, enc, cb) => {
		emit({ type: name, text: Buffer.isBuffer(chunk) ? chunk.toString('utf8') : String(chunk) });
		if (typeof enc === 'function') enc(); else if (typeof cb === 'function') cb();
		return true;
	};

const fmt = (args) => util.formatWithOptions({ colors: false }, ...args) + '\n';
const sandboxConsole = {};
for (const [name, stream] of [['log', 'stdout'], ['info', 'stdout'], ['debug', 'stdout'],
	['warn', 'stderr'], ['error', 'stderr'], ['trace', 'stderr']])
	sandboxConsole[name] = (...args) => emit({ type: stream, text: fmt(args) });
sandboxConsole.dir = (o) => emit({ type: 'stdout', text: util.inspect(o) + '\n' });
sandboxConsole.table = sandboxConsole.log;

const globals = {
	console: sandboxConsole, process, Buffer, URL, URLSearchParams, TextEncoder, TextDecoder,
	setTimeout, clearTimeout, setInterval, clearInterval, setImmediate, clearImmediate,
	queueMicrotask, structuredClone, fetch: globalThis.fetch, AbortController,
	require: createRequire(process.cwd() + '/'),
};
const context = vm.createContext(globals);
globals.display = (v) => emit({ type: 'result', isMainResult: false, data: bundle(v) });

function bundle(v) {
	const data = { 'text/plain': util.inspect(v, { colors: false }) };
	if (v !== null && typeof v === 'object' && !(v instanceof Error)) {
		try { data['application/json'] = JSON.parse(JSON.stringify(v)); } catch (e) { /* not JSON */ }
	}
	return data;
}

// --- TypeScript: drop type syntax, keep everything else in place ---------
const KEYWORDS_BEFORE_EXPR = /^(return|typeof|case|do|else|in|of|new|delete|void|throw|yield|await)$/;
function stripTypes(src) {
	let out = '';
	let i = 0;
	const n = src.length;
	const stack = [];            // open brackets: '(' '[' '{'
	let ternary = [0];           // '?' waiting for ':' per bracket level
	let prev = '';               // the last significant token
	let prevWord = '';
	let declPending = false;     // after let/const/var <name>
	let classPending = false;    // after 'class': its next '{' opens a class body ('C')
	let ctorDepth = -1;          // stack depth inside `constructor(…)`
	let ctorProps = [];          // its parameter properties (`private x`)
	let ctorBody = null;         // …assigned at the start of its body
	const isId = (c) => /[A-Za-z0-9_$]/.test(c);
	const skipSpace = (j) => { while (j < n && /\s/.test(src[j])) j++; return j; };
	// The end of a type starting at j: balanced brackets, stops at a
	// delimiter at depth 0 (stops: the characters that end it).
	function typeEnd(j, stops) {
		let depth = 0;
		const start = j;
		while (j < n) {
			const c = src[j];
			if (c === '"' || c === "'" || c === '`') { j = stringEnd(j); continue; }
			if (c === '{' && depth === 0 && j > start && stops.includes('{')) return j;
			if ('([{<'.includes(c)) depth++;
			else if (')]}>'.includes(c)) {
				if (c === '>' && src[j - 1] === '=') { if (depth === 0 && stops.includes('=>')) return j - 1; j++; continue; }
				if (depth === 0) return j;
				depth--;
				if (depth === 0 && c === '}' && stops.includes('}')) return j + 1;
			} else if (depth === 0) {
				if (stops.includes(c) && !(c === '=' && src[j + 1] === '>')) return j;
				if (c === '\n' && stops.includes('\n')) return j;
			}
			j++;
		}
		return j;
	}
	function stringEnd(j) {
		const q = src[j++];
		while (j < n && src[j] !== q) { if (src[j] === '\\') j++; j++; }
		return j + 1;
	}
	while (i < n) {
		const c = src[i];
		if (c === '/' && src[i + 1] === '/') { const e = src.indexOf('\n', i); const k = e < 0 ? n : e; out += src.slice(i, k); i = k; continue; }
		if (c === '/' && src[i + 1] === '*') { const e = src.indexOf('*/', i + 2); const k = e < 0 ? n : e + 2; out += src.slice(i, k); i = k; continue; }
		if (c === '"' || c === "'" || c === '`') { const k = stringEnd(i); out += src.slice(i, k); i = k; prev = 'str'; continue; }
		if (isId(c)) {
			let k = i;
			while (k < n && isId(src[k])) k++;
			const w = src.slice(i, k);
			const atStmt = prev === '' || prev === ';' || prev === '{' || prev === '}' || prev === 'nl';
			if ((w === 'interface' || (w === 'type' && /^\s+[A-Za-z_$][\w$]*\s*(<[^>]*>)?\s*=/.test(src.slice(k)))) && atStmt) {
				const e = w === 'interface' ? typeEnd(src.indexOf('{', k), ['}']) : typeEnd(k, [';', '\n']);
				i = e < n && src[e] === ';' ? e + 1 : e;
				continue;
			}
			if (w === 'declare' && atStmt) { const e = typeEnd(k, [';', '\n']); i = e; continue; }
			if ((w === 'public' || w === 'private' || w === 'protected' || w === 'readonly') && /^\s+[A-Za-z_$]/.test(src.slice(k)) && stack[stack.length - 1] !== undefined) {
				i = skipSpace(k);
				const m = /^[A-Za-z_$][\w$]*/.exec(src.slice(i));
				if (stack.length === ctorDepth && m && !/^(public|private|protected|readonly)$/.test(m[0]))
					ctorProps.push(m[0]);
				continue;
			}
			if (w === 'constructor' && src[skipSpace(k)] === '(') ctorDepth = stack.length + 1;
			if (w === 'as' && (prev === 'id' || prev === ')' || prev === ']' || prev === 'str') && /^\s+[A-Za-z_${[(]/.test(src.slice(k))) {
				i = typeEnd(skipSpace(k), [';', ',', ')', ']', '}', '\n', '=']);
				continue;
			}
			if ((w === 'implements') && prev === 'id') { i = typeEnd(k, ['{']); continue; }
			out += w;
			declPending = (w === 'let' || w === 'const' || w === 'var') ? 'kw' : (declPending === 'kw' ? 'name' : false);
			if (w === 'class') classPending = true;
			prevWord = w;
			prev = KEYWORDS_BEFORE_EXPR.test(w) ? 'kw' : 'id';
			i = k;
			// generics after a declared name: function f<T>(, class C<T> {
			if ((prevWord && /^(function|class)$/.test(out.slice(0, -w.length).trim().split(/\s+/).pop() || '')) && src[skipSpace(i)] === '<') {
				i = typeEnd(skipSpace(i) + 1, ['>']) + 1;
			}
			continue;
		}
		if (c === '\n') { out += c; i++; if (stack.length === 0 && prev !== ',' && prev !== '(') prev = 'nl'; continue; }
		if (/\s/.test(c)) { out += c; i++; continue; }
		if (c === '<' && prev === 'id') { // type arguments of a call: f<T>(…), new C<T>()
			const e = typeEnd(i + 1, ['>']);
			if (src[e] === '>' && src[e + 1] === '(' && /^[\w$\s,.[\]|&<>]+$/.test(src.slice(i + 1, e)) &&
			    /[A-Za-z_$]/.test(src.slice(i + 1, e))) { i = e + 1; continue; }
		}
		if (c === '!' && (prev === 'id' || prev === ')' || prev === ']') && src[i + 1] !== '=') { i++; continue; }
		if (c === '?' && src[i + 1] === ':' && prev === 'id') { i++; continue; } // optional param/property
		if (c === '?' && src[i + 1] !== '.' && src[i + 1] !== '?') { ternary[ternary.length - 1]++; out += c; i++; prev = '?'; continue; }
		if (c === ':') {
			const top = stack[stack.length - 1];
			if (ternary[ternary.length - 1] > 0) { ternary[ternary.length - 1]--; out += c; i++; prev = ':'; continue; }
			const annotate = (top === '(' && prev === 'id') || prev === ')' && top !== '[' ||
				(top === 'C' && prev === 'id') ||
				(declPending === 'name' && prev === 'id');
			if (annotate) {
				const stops = prev === ')' ? ['{', '=>', ';', '\n', '='] : top === '(' ? [',', ')', '='] :
					top === 'C' ? [';', '=', '\n', '}'] : [',', ';', '=', '\n'];
				i = typeEnd(skipSpace(i + 1), stops);
				declPending = false;
				continue;
			}
			out += c; i++; prev = ':'; continue;
		}
		if ('([{'.includes(c)) {
			stack.push(c === '{' && classPending ? 'C' : c);
			if (c === '{') classPending = false;
			ternary.push(0);
			if (c === '{' && ctorBody) {
				out += '{' + ctorBody.map((p) => ` this.${p} = ${p};`).join('');
				ctorBody = null;
				i++;
				prev = c;
				continue;
			}
		}
		else if (')]}'.includes(c)) {
			if (c === ')' && stack.length === ctorDepth) {
				ctorBody = ctorProps.length ? ctorProps : null;
				ctorProps = [];
				ctorDepth = -1;
			}
			stack.pop(); ternary.pop(); if (!ternary.length) ternary = [0];
		}
		if (c === ',' || c === '=' || c === ';') declPending = c === ',' && declPending ? 'kw' : false;
		out += c; i++;
		prev = c;
	}
	return out;
}

// --- running ------------------------------------------------------------
let count = 0;
let interrupt = null;            // rejects the running async run on SIGINT
process.on('SIGINT', () => { if (interrupt) interrupt(); });

function errorOut(e) {
	if (e instanceof Error || (e && typeof e === 'object' && 'stack' in e)) {
		emit({ type: 'error', name: e.name || 'Error', value: String(e.message),
			traceback: String(e.stack || '').split('\n')
				.filter((l) => !/\((node:|\[eval\])|at (node:|\[eval\]|sigintHandlersWrap)/.test(l)) });
	} else {
		emit({ type: 'error', name: 'Error', value: util.inspect(e), traceback: [] });
	}
}

// Code with top-level await, as the body of an async function: the top-level
// declarations are hoisted to globals, and the last expression statement is
// returned.
function asyncBody(code, withReturn) {
	let body = code.replace(/^(let|const|var)\s+([A-Za-z_$][\w$]*)\s*=/gm, 'globalThis.$2 =')
		.replace(/^(async\s+)?function\s+([A-Za-z_$][\w$]*)/gm, 'globalThis.$2 = $1function $2')
		.replace(/^class\s+([A-Za-z_$][\w$]*)/gm, 'globalThis.$1 = class $1');
	const lines = body.replace(/\s+$/, '').split('\n');
	const last = lines[lines.length - 1];
	if (withReturn && last && /^[^\s}]/.test(last) &&
	    !/^(let|const|var|if|for|while|do|switch|try|return|throw|class|function|async\s+function|import|export|globalThis\.\w+\s*=\s*(async\s+)?(function|class))\b/.test(last)) {
		lines[lines.length - 1] = 'return (' + last.replace(/;\s*$/, '') + '\n)';
	}
	return '(async () => {\n' + lines.join('\n') + '\n})()';
}

async function run(code) {
	if (typescript) code = stripTypes(code);
	let script;
	let isAsync = false;
	try {
		script = new vm.Script(code, { filename: `cell-${count}.js` });
	} catch (e) {
		if (!(e instanceof SyntaxError) || !/await/.test(code)) throw e;
		const opts = { filename: `cell-${count}.js`, lineOffset: -1 };
		try {
			script = new vm.Script(asyncBody(code, true), opts);
		} catch (e2) {
			// the last line continues a statement: run it without a result
			script = new vm.Script(asyncBody(code, false), opts);
		}
		isAsync = true;
	}
	let value = script.runInContext(context, { breakOnSigint: true, displayErrors: false });
	if (isAsync) {
		value = await Promise.race([value, new Promise((resolve, reject) => {
			interrupt = () => { const e = new Error('Script execution was interrupted by SIGINT'); e.name = 'KeyboardInterrupt'; reject(e); };
		})]);
	}
	if (value !== undefined)
		emit({ type: 'result', isMainResult: true, data: bundle(value) });
}

let queue = Promise.resolve();
const rl = readline.createInterface({ input: process.stdin, terminal: false });
rl.on('line', (line) => {
	let req;
	try { req = JSON.parse(line); } catch (e) { return; }
	queue = queue.then(async () => {
		count++;
		try {
			await run(String(req.code || ''));
		} catch (e) {
			if (e && /interrupted/.test(String(e.message))) e.name = 'KeyboardInterrupt';
			errorOut(e);
		}
		interrupt = null;
		emit({ type: 'end', executionCount: count });
	});
});
rl.on('close', () => queue.then(() => process.exit(0)));
process.on('uncaughtException', (e) => emit({ type: 'stderr', text: 'Uncaught ' + (e && e.stack || e) + '\n' }));
process.on('unhandledRejection', (e) => emit({ type: 'stderr', text: 'Unhandled rejection ' + (e && e.stack || e) + '\n' }));
emit({ type: 'ready' });
