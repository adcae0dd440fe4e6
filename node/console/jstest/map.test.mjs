// Unit tests of the console's MAP client failover (run by js_test.go with
// `node --test`): a fake WebSocket stands in for the nodes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MapClient } from '../assets/js/map.js';
import { Nodes } from '../assets/js/nodes.js';

// FakeNode answers MAP like a node would, as far as these tests need.
class FakeNode {
  constructor(id, { refuseResume = false, failConnect = false, apiKey = '' } = {}) {
    this.id = id;
    this.apiKey = apiKey; // when set, map/connect needs auth {method: 'api-key', token: apiKey}
    this.down = false;
    this.refuseResume = refuseResume;
    this.failConnect = failConnect;
    this.sockets = [];
    this.calls = [];
    this.subs = 0;
  }

  handle(ws, msg) {
    this.calls.push(msg);
    const reply = (result) => ws.deliver({ jsonrpc: '2.0', id: msg.id, result });
    const fail = (code, message) => ws.deliver({ jsonrpc: '2.0', id: msg.id, error: { code, message } });
    const p = msg.params || {};
    switch (msg.method) {
      case 'map/connect':
        if (this.failConnect) return fail(-32603, 'not ready');
        if (this.apiKey && !p.auth) return fail(1000, 'Authentication required');
        if (this.apiKey && (p.auth.method !== 'api-key' || p.auth.token !== this.apiKey)) return fail(1001, 'Invalid credentials');
        if (p.resumeToken && this.refuseResume) return fail(1001, 'resume refused');
        if (p.resumeToken) return reply({ sessionId: p.sessionId, resumeToken: p.resumeToken, reconnected: true, systemInfo: { nodeId: this.id } });
        return reply({ sessionId: `s-${this.id}`, resumeToken: `t-${this.id}`, reconnected: false, systemInfo: { nodeId: this.id } });
      case 'map/subscribe':
        return reply({ subscriptionId: `sub-${this.id}-${++this.subs}` });
      default:
        return reply({});
    }
  }

  // kill closes every connection and refuses new ones.
  kill() {
    this.down = true;
    for (const ws of this.sockets) ws.close();
  }

  push(subscriptionId, eventId, type) {
    for (const ws of this.sockets) {
      if (ws.readyState === 1) ws.deliver({ jsonrpc: '2.0', method: 'map/event', params: { subscriptionId, eventId, event: { type } } });
    }
  }
}

const nodes = new Map(); // ws URL → FakeNode

class FakeWebSocket {
  static OPEN = 1;

  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.node = nodes.get(url);
    setTimeout(() => {
      if (!this.node || this.node.down) {
        this.readyState = 3;
        if (this.onerror) this.onerror();
        if (this.onclose) this.onclose();
        return;
      }
      this.readyState = 1;
      this.node.sockets.push(this);
      if (this.onopen) this.onopen();
    });
  }

  send(data) {
    const msg = JSON.parse(data);
    setTimeout(() => this.node.handle(this, msg));
  }

  deliver(obj) {
    if (this.readyState === 1 && this.onmessage) this.onmessage({ data: JSON.stringify(obj) });
  }

  close() {
    if (this.readyState === 3) return;
    this.readyState = 3;
    setTimeout(() => { if (this.onclose) this.onclose(); });
  }
}
globalThis.WebSocket = FakeWebSocket;
console.debug = () => {}; // the client logs each failed attempt

// cluster builds two fake nodes a and b and a client opened on a.
function cluster(opts = {}, aOpts = {}) {
  nodes.clear();
  const a = new FakeNode('a', aOpts);
  const b = new FakeNode('b', opts);
  nodes.set('ws://a.test:1/map', a);
  nodes.set('ws://b.test:2/map', b);
  const view = new Nodes('http://a.test:1');
  view.setMembers([{ id: 'a', httpAddr: 'a.test:1', status: 'alive' }, { id: 'b', httpAddr: 'b.test:2', status: 'alive' }]);
  const client = new MapClient(view);
  return { a, b, view, client };
}

function connected(client) {
  return new Promise((resolve) => client.addEventListener('connected', (e) => resolve(e.detail), { once: true }));
}

function nextEvent(list) {
  return new Promise((resolve) => { list.wake = resolve; });
}

test('resumes the session on another node when its node dies', async (t) => {
  const { a, b, view, client } = cluster();
  t.after(() => client.stop());
  const first = connected(client);
  client.start();
  assert.equal((await first).nodeId, 'a');
  const seen = [];
  await client.subscribe({ filter: { eventTypes: ['x.*'] } }, (ev) => { seen.push(ev.type); if (seen.wake) seen.wake(); }, { replay: true });
  let got = nextEvent(seen);
  a.push('sub-a-1', 'e1', 'x.one');
  await got;

  const moved = connected(client);
  a.kill();
  const info = await moved;
  assert.equal(info.nodeId, 'b');
  assert.equal(info.reconnected, true);
  assert.equal(view.current, 'http://b.test:2');
  const connect = b.calls.find((m) => m.method === 'map/connect');
  assert.deepEqual([connect.params.sessionId, connect.params.resumeToken], ['s-a', 't-a']);
  assert.equal(b.calls.filter((m) => m.method === 'map/subscribe').length, 0, 'a resumed session keeps its subscriptions');

  got = nextEvent(seen);
  b.push('sub-a-1', 'e2', 'x.two');
  await got;
  assert.deepEqual([...seen], ['x.one', 'x.two']);
});

test('subscribes again, after the last event, when the resume is refused', async (t) => {
  const { a, b, client } = cluster({ refuseResume: true });
  t.after(() => client.stop());
  const first = connected(client);
  client.start();
  await first;
  const runs = [];
  await client.subscribe({ filter: { eventTypes: ['run.*'] } }, (ev) => { runs.push(ev.type); if (runs.wake) runs.wake(); }, { replay: true });
  await client.subscribe({ filter: { eventTypes: ['message.*'] } }, () => {});
  const got = nextEvent(runs);
  a.push('sub-a-1', 'e7', 'run.one');
  a.push('sub-a-2', 'm1', 'message_sent');
  await got;

  const moved = connected(client);
  a.kill();
  const info = await moved;
  assert.equal(info.reconnected, false);
  const connects = b.calls.filter((m) => m.method === 'map/connect');
  assert.equal(connects.length, 2, 'a refused resume is followed by a fresh connect');
  assert.equal(connects[1].params.sessionId, undefined);
  const subs = b.calls.filter((m) => m.method === 'map/subscribe').map((m) => m.params);
  assert.deepEqual(subs, [
    { filter: { eventTypes: ['run.*'] }, replayFrom: 'e7' },
    { filter: { eventTypes: ['message.*'] } },
  ]);
  const after = nextEvent(runs);
  b.push('sub-b-1', 'e8', 'run.two');
  await after;
  assert.deepEqual([...runs], ['run.one', 'run.two']);
});

test('a node that accepts the socket but fails map/connect costs one attempt, not a second loop', async (t) => {
  const { a, b, client } = cluster({}, { failConnect: true });
  t.after(() => client.stop());
  const first = connected(client);
  client.start();
  assert.equal((await first).nodeId, 'b');
  await new Promise((r) => setTimeout(r, 300)); // a second loop would connect again meanwhile
  assert.equal(b.calls.filter((m) => m.method === 'map/connect').length, 1);
  assert.equal(b.sockets.filter((ws) => ws.readyState === 1).length, 1);
  assert.equal(a.sockets.filter((ws) => ws.readyState === 1).length, 0);
});

test('asks for a credential when the node requires one, then connects with it', async (t) => {
  const { a, client } = cluster({ apiKey: 'k1' }, { apiKey: 'k1' });
  t.after(() => client.stop());
  const asks = [];
  client.addEventListener('auth-required', (e) => { asks.push(e.detail); if (asks.wake) asks.wake(); });
  let asked = nextEvent(asks);
  client.start();
  await asked;
  assert.equal(asks[0].code, 1000);
  assert.equal(asks[0].hadCredential, false);
  assert.equal(client.state, 'auth');
  const tries = a.calls.filter((m) => m.method === 'map/connect').length;
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(a.calls.filter((m) => m.method === 'map/connect').length, tries, 'no retry storm while waiting for a credential');

  asked = nextEvent(asks);
  client.setCredential({ method: 'api-key', token: 'wrong' });
  await asked;
  assert.deepEqual([asks[1].code, asks[1].hadCredential], [1001, true]);

  const up = connected(client);
  client.setCredential({ method: 'api-key', token: 'k1' });
  assert.equal((await up).nodeId, 'a');
  const last = a.calls.filter((m) => m.method === 'map/connect').at(-1);
  assert.deepEqual(last.params.auth, { method: 'api-key', token: 'k1' });
  assert.equal(last.params.participantType, 'client');
});

test('an operator credential connects as a system participant', async (t) => {
  const { a, client } = cluster();
  t.after(() => client.stop());
  client.setCredential({ method: 'bearer', token: 't', participantType: 'system' });
  const up = connected(client);
  client.start();
  await up;
  const c = a.calls.find((m) => m.method === 'map/connect');
  assert.equal(c.params.participantType, 'system');
  assert.deepEqual(c.params.auth, { method: 'bearer', token: 't' });
});
