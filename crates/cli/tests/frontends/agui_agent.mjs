// Drives `POST /v1/agui` with @ag-ui/client's HttpAgent (pinned in
// package.json) for crates/cli/tests/agui_agent.rs. Reads
// {url, mode, thread, headers?} on stdin and prints one JSON object; any
// broken expectation throws (node exits non-zero, the test shows stderr).
//
// Every response's events (as Keel sent them, read from the raw SSE
// body) pass @ag-ui/client's verifyEvents. Modes:
// - conversation: two runs on one threadId, each a user message;
// - tools: a frontend tool round trip (the client posts the tool result),
//   then an approval through the interrupt outcome and `resume`;
// - cut: a response cut mid-run and resumed with Last-Event-ID, and the
//   same at every cut position of the finished run's stream: the events
//   stitched together are the whole run's, none lost, none repeated.
import { HttpAgent, verifyEvents } from '@ag-ui/client';
import { from, lastValueFrom, toArray } from 'rxjs';

let input = '';
for await (const piece of process.stdin) input += piece;
const cfg = JSON.parse(input);
const headers = cfg.headers ?? {};

function fail(message) {
  throw new Error(message);
}

/** The SSE messages of `text`: {id?, event} (event null for an id-only message). */
function parseSse(text) {
  const messages = [];
  for (const block of text.split('\n\n')) {
    let id;
    const data = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('id:')) id = line.slice(3).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (id === undefined && data.length === 0) continue;
    messages.push({ id, event: data.length ? JSON.parse(data.join('\n')) : null });
  }
  return messages;
}

async function verified(events, what) {
  try {
    await lastValueFrom(from(events).pipe(verifyEvents(), toArray()));
  } catch (e) {
    fail(`verifyEvents refused ${what}: ${e.message}\n${JSON.stringify(events.map((e) => e.type))}`);
  }
}

/** Checks the SSE ids: each a cursor, never going back. */
function checkIds(messages, what) {
  let last = -1;
  for (const m of messages) {
    if (m.id === undefined) fail(`${what}: a message without id`);
    const id = Number(m.id);
    if (!Number.isInteger(id) || id < last) fail(`${what}: id ${m.id} after ${last}`);
    last = id;
  }
}

/** A fetch that keeps a copy of each response body's text. */
function capturing(bodies) {
  return async (url, init) => {
    const res = await fetch(url, init);
    if (!res.ok || !res.body) return res;
    const [mine, theirs] = res.body.tee();
    bodies.push(new Response(mine).text());
    return new Response(theirs, { status: res.status, headers: res.headers });
  };
}

function agent(bodies) {
  return new HttpAgent({ url: cfg.url, threadId: cfg.thread, headers, fetch: capturing(bodies) });
}

/** One runAgent: the events HttpAgent applied and the raw stream's. */
async function run(a, bodies, params, what) {
  const applied = [];
  await a.runAgent(params, { onEvent: ({ event }) => { applied.push(event); } });
  const sse = parseSse(await bodies.shift());
  checkIds(sse, what);
  const events = sse.filter((m) => m.event).map((m) => m.event);
  await verified(events, what);
  await verified(applied, `${what} (as applied)`);
  return { events, ids: sse.map((m) => Number(m.id)), applied: applied.map((e) => e.type) };
}

async function conversation() {
  const bodies = [];
  const a = agent(bodies);
  a.addMessage({ id: 'u1', role: 'user', content: 'Count to six.' });
  const first = await run(a, bodies, { runId: 'r1' }, 'run 1');
  a.addMessage({ id: 'u2', role: 'user', content: 'Again, please.' });
  const second = await run(a, bodies, { runId: 'r2' }, 'run 2');
  return { runs: [first, second], messages: a.messages };
}

const PICK_COLOR = {
  name: 'pick_color',
  description: 'Asks the user for a color',
  parameters: { type: 'object', properties: { palette: { type: 'string' } } },
};

async function tools() {
  const bodies = [];
  const a = agent(bodies);
  const toolsParam = [PICK_COLOR];
  a.addMessage({ id: 'u1', role: 'user', content: 'Refund A-17, in my color.' });
  const first = await run(a, bodies, { runId: 'r1', tools: toolsParam }, 'run 1');
  const call = a.messages
    .filter((m) => m.role === 'assistant')
    .flatMap((m) => m.toolCalls ?? [])
    .find((c) => c.function.name === 'pick_color');
  if (!call) fail(`no pick_color call in ${JSON.stringify(a.messages)}`);
  a.addMessage({ id: 't1', role: 'tool', toolCallId: call.id, content: 'teal' });
  const second = await run(a, bodies, { runId: 'r2', tools: toolsParam }, 'run 2');
  const finished = second.events.find((e) => e.type === 'RUN_FINISHED');
  const interrupts = finished?.outcome?.interrupts ?? fail(`no interrupt: ${JSON.stringify(finished)}`);
  const resume = interrupts.map((i) => ({ interruptId: i.id, status: 'resolved', payload: { approved: true } }));
  const third = await run(a, bodies, { runId: 'r3', tools: toolsParam, resume }, 'run 3');
  return { runs: [first, second, third], call, interrupts, messages: a.messages };
}

const CUT_BODY = {
  threadId: cfg.thread,
  runId: 'cut-1',
  messages: [{ id: 'u1', role: 'user', content: 'Count to six.' }],
  tools: [],
  context: [],
  state: {},
  forwardedProps: {},
};

/** POSTs the body (with Last-Event-ID when given) and reads the SSE
 * messages, until `stop(messages)` says to cut the connection. */
async function post(lastEventId, stop = () => false) {
  const controller = new AbortController();
  const h = { ...headers, 'Content-Type': 'application/json', Accept: 'text/event-stream' };
  if (lastEventId !== undefined) h['Last-Event-ID'] = String(lastEventId);
  const res = await fetch(cfg.url, { method: 'POST', headers: h, body: JSON.stringify(CUT_BODY), signal: controller.signal });
  if (res.status !== 200) fail(`status ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let text = '';
  const reader = res.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    const whole = text.slice(0, text.lastIndexOf('\n\n') + 2);
    const messages = parseSse(whole);
    if (stop(messages)) {
      controller.abort();
      return { messages, cut: true };
    }
  }
  return { messages: parseSse(text), cut: false };
}

const isClosing = (e) => e.type === 'RUN_FINISHED' || e.type === 'RUN_ERROR';

/** The scope a start event opens (or an end closes), as a key. */
function scope(e) {
  switch (e.type) {
    case 'STEP_STARTED': case 'STEP_FINISHED': return `step:${e.stepName}`;
    case 'TEXT_MESSAGE_START': case 'TEXT_MESSAGE_END': return `text:${e.messageId}`;
    case 'REASONING_START': case 'REASONING_END': return `reasoning:${e.messageId}`;
    case 'REASONING_MESSAGE_START': case 'REASONING_MESSAGE_END': return `reasoning-message:${e.messageId}`;
    case 'TOOL_CALL_START': case 'TOOL_CALL_END': return `tool:${e.toolCallId}`;
    default: return undefined;
  }
}
const isStart = (e) => /_(START|STARTED)$/.test(e.type) && e.type !== 'RUN_STARTED';

/** The scopes `events` leave open. */
function openScopes(events) {
  const open = new Set();
  for (const e of events) {
    const key = scope(e);
    if (key === undefined) continue;
    if (isStart(e)) open.add(key);
    else open.delete(key);
  }
  return open;
}

/** A response's head and the rest: RUN_STARTED, CUSTOM keel.run, then
 * (a resume) the starts of the scopes the client has open (`open`),
 * which it already has. */
function split(messages, open = new Set()) {
  let n = 0;
  const headOf = (e) => e.type === 'RUN_STARTED' || (e.type === 'CUSTOM' && e.name === 'keel.run')
    || (isStart(e) && open.has(scope(e)));
  while (n < messages.length && messages[n].event && headOf(messages[n].event)) n += 1;
  return { head: messages.slice(0, n), content: messages.slice(n) };
}

/** What a client that lost the connection after `messages` keeps, and
 * the cursor it resumes from: the last id it saw, L. Each Keel event's
 * messages end with one carrying its seq (an id-only message when it maps
 * to nothing); the ones before carry seq - 1. So the first content
 * message carrying L ends event L, and those after it begin event L + 1,
 * which the resume sends again whole: they are dropped. */
function keep(messages) {
  const last = messages[messages.length - 1].id;
  const { head, content } = split(messages);
  if (head.length && head[0].id === last) return { cursor: last, kept: [] };
  const end = content.findIndex((m) => m.id === last);
  return { cursor: last, kept: content.slice(0, end + 1).filter((m) => m.event).map((m) => m.event) };
}

const json = (events) => events.map((e) => JSON.stringify(e));

async function stitched(messages, what) {
  const { cursor, kept } = keep(messages);
  const resumed = await post(cursor);
  checkIds(resumed.messages, what);
  const events = resumed.messages.filter((m) => m.event).map((m) => m.event);
  await verified(events, what);
  if (!events.length || events[0].type !== 'RUN_STARTED') fail(`${what}: no RUN_STARTED first`);
  if (!isClosing(events[events.length - 1])) fail(`${what}: no RUN_FINISHED last`);
  const tail = split(resumed.messages, openScopes(kept)).content.filter((m) => m.event).map((m) => m.event);
  return { cursor, events: [...kept.filter((e) => !isClosing(e)), ...tail] };
}

async function cut() {
  // A real cut: the connection dropped while the run goes on.
  let contents = 0;
  const first = await post(undefined, (ms) => {
    contents = ms.filter((m) => m.event?.type === 'TEXT_MESSAGE_CONTENT').length;
    return contents >= 2;
  });
  if (!first.cut) fail('the run ended before the cut');
  checkIds(first.messages, 'the cut response');
  const live = await stitched(first.messages, 'the resume of the cut response');
  // The finished run, whole (Last-Event-ID: 0), and a resume from every
  // point its stream could have been cut at.
  const whole = await post(0);
  const wholeEvents = whole.messages.filter((m) => m.event).map((m) => m.event);
  await verified(wholeEvents, 'the whole run');
  const reference = split(whole.messages).content.filter((m) => m.event).map((m) => m.event);
  if (JSON.stringify(json(live.events)) !== JSON.stringify(json(reference))) {
    fail(`the cut run stitched differs:\n${json(live.events).join('\n')}\n---\n${json(reference).join('\n')}`);
  }
  const cursors = new Set();
  for (let k = 1; k <= whole.messages.length; k += 1) {
    const at = await stitched(whole.messages.slice(0, k), `the resume after message ${k}`);
    if (JSON.stringify(json(at.events)) !== JSON.stringify(json(reference))) {
      fail(`cut after message ${k} (cursor ${at.cursor}) stitched differs:\n${json(at.events).join('\n')}\n---\n${json(reference).join('\n')}`);
    }
    cursors.add(at.cursor);
  }
  return {
    cut_cursor: live.cursor,
    cut_messages: first.messages.length,
    whole_messages: whole.messages.length,
    cursors: [...cursors].map(Number),
    types: reference.map((e) => e.type),
  };
}

const modes = { conversation, tools, cut };
const out = await (modes[cfg.mode] ?? (() => fail(`unknown mode ${cfg.mode}`)))();
console.log(JSON.stringify(out));
