// Interop check: the official MAP TypeScript SDK (@multi-agent-protocol/sdk,
// pinned in package.json) talking to a Concord node, unchanged.
//
//   node interop.mjs ws://127.0.0.1:PORT/map
//
// Every check prints one PASS/FAIL/SKIP line; the last line is
// "N passed, N failed". Exit status 0 only when nothing failed. A global
// deadline (INTEROP_TIMEOUT_MS, default 30000) ends a hung run with status 2.
// SDK-WIRE.md beside this file explains what the SDK sends and expects.
import { isDeepStrictEqual } from "node:util";
import WS from "ws";
// checks.mjs installs the ws WebSocket class globally before the SDK loads.
import {
  Expectation,
  Inbox,
  STEP_MS,
  check,
  deadline as startDeadline,
  errText,
  expect,
  failures,
  show,
  skip,
  summary,
  tapSocket,
} from "./checks.mjs";

const { AgentConnection, ClientConnection, EVENT_TYPES, websocketStream, waitForOpen } =
  await import("@multi-agent-protocol/sdk");

const url = process.argv[2];
if (!url) {
  console.error("usage: node interop.mjs ws://host:port/map");
  process.exit(64);
}
const deadline = startDeadline(Number(process.env.INTEROP_TIMEOUT_MS || 30000));

// openSocket opens a WebSocket and taps its raw inbound JSON-RPC objects.
async function openSocket(tap) {
  const ws = new WS(url);
  await waitForOpen(ws, STEP_MS);
  if (tap) tapSocket(ws, tap);
  return ws;
}

const ulidRe = /^[0-9A-HJKMNP-TV-Z]{26}$/;
const state = {};
const closers = [];

// ---------------------------------------------------------------- connect
const clientWire = new Inbox();
const okClient = await check("client map/connect (ClientConnection)", async () => {
  state.clientWs = await openSocket(clientWire);
  state.client = new ClientConnection(websocketStream(state.clientWs), { name: "interop-client", defaultTimeout: STEP_MS });
  closers.push(() => state.client.disconnect());
  const r = await state.client.connect();
  state.clientConnect = r;
  expect(typeof r?.sessionId === "string" && r.sessionId !== "", `sessionId missing: ${show(r)}`);
  expect(typeof r.participantId === "string" && r.participantId !== "", `participantId missing: ${show(r)}`);
  expect(r.protocolVersion === 1, `protocolVersion ${show(r.protocolVersion)}, want 1`);
  expect(r.capabilities && typeof r.capabilities === "object", `capabilities missing: ${show(r)}`);
  return `session ${r.sessionId}`;
});

const inboxA = new Inbox();
const inboxB = new Inbox();
const okA = await check("agent A map/connect + map/agents/register (new AgentConnection + connect())", async () => {
  state.aWs = await openSocket();
  state.a = new AgentConnection(websocketStream(state.aWs), { name: "agent-a", role: "requester", defaultTimeout: STEP_MS });
  state.a.onMessage((m) => inboxA.push(m));
  const { connection, agent } = await state.a.connect();
  state.aConnect = connection;
  state.aAgent = agent;
  expect(typeof connection?.sessionId === "string" && connection.sessionId !== "", `sessionId missing: ${show(connection)}`);
  expect(typeof agent?.id === "string" && agent.id !== "", `agent.id missing: ${show(agent)}`);
  expect(typeof agent.state === "string", `agent.state missing: ${show(agent)}`);
  expect(state.a.agentId === agent.id, "SDK did not record the agent id");
  return `agent ${agent.id}, state ${agent.state}`;
});
const okB = await check("agent B AgentConnection.connect(url) factory", async () => {
  state.b = await AgentConnection.connect(url, { name: "agent-b", role: "responder" });
  closers.push(() => state.b.disconnect());
  state.b.onMessage((m) => inboxB.push(m));
  expect(typeof state.b.agentId === "string" && state.b.agentId !== "", "agent id missing");
  expect(state.b.agentId !== state.a?.agentId, "A and B got the same agent id");
  return `agent ${state.b.agentId}`;
});
const A = () => state.a.agentId;
const B = () => state.b.agentId;

// ---------------------------------------------------------------- queries
if (okClient && okA && okB) {
  await check("client map/agents/list sees A and B", async () => {
    const r = await state.client.listAgents();
    expect(Array.isArray(r?.agents), `result.agents is not an array: ${show(r)}`);
    const ids = r.agents.map((x) => x.id);
    expect(ids.includes(A()) && ids.includes(B()), `ids ${show(ids)} lack ${A()} or ${B()}`);
    const a = r.agents.find((x) => x.id === A());
    expect(a.name === "agent-a" && a.role === "requester", `A listed as ${show(a)}`);
    return `${ids.length} agents`;
  });
  await check("client map/agents/list with filter {roles:[responder]}", async () => {
    const r = await state.client.listAgents({ filter: { roles: ["responder"] } });
    const ids = (r?.agents || []).map((x) => x.id);
    expect(ids.includes(B()) && !ids.includes(A()), `got ${show(ids)}`);
  });
  await check("client map/agents/get A", async () => {
    const r = await state.client.getAgent(A());
    expect(r?.agent?.id === A(), `got ${show(r)}`);
    expect(typeof r.agent.state === "string", `agent.state missing: ${show(r.agent)}`);
  });
  await check("ClientConnection.connect(url) factory lists A and B, then map/disconnect", async () => {
    const c2 = await ClientConnection.connect(url, { name: "interop-client-2" });
    const r = await c2.listAgents({ limit: 100 });
    const ids = (r?.agents || []).map((x) => x.id);
    expect(ids.includes(A()) && ids.includes(B()), `ids ${show(ids)}`);
    await c2.disconnect("interop done");
    expect(!c2.isConnected, "still connected after disconnect");
  });
  await check("map/agents/get of an unknown id fails with 2001", async () => {
    let r;
    try {
      r = await state.client.getAgent("no-such-agent-interop");
    } catch (e) {
      expect(e?.code === 2001, `want error code 2001, got ${errText(e)}`);
      return;
    }
    throw new Expectation(`unexpected result ${show(r)}`);
  });
} else {
  skip("queries", "a connect step failed");
}

// ---------------------------------------------------------------- messaging
const richPayload = {
  text: "héllo ✓ 𝄞 \"quoted\" \\ back",
  n: 42,
  f: 3.25,
  neg: -7,
  big: 9007199254740991,
  t: true,
  nil: null,
  arr: [1, "two", { three: [3] }, []],
  nested: { deep: { deeper: { deepest: "x" } }, empty: {} },
};
if (okA && okB) {
  let delivered;
  let sendResult;
  const okSend = await check("A → B map/send: B receives map/message with from = A, payload and meta intact", async () => {
    sendResult = await state.a.send({ agent: B() }, richPayload, {
      correlationId: "interop-corr-1",
      priority: "high",
      expectsResponse: true,
      _meta: { trace: "t-1" },
    });
    expect(typeof sendResult?.messageId === "string" && sendResult.messageId !== "", `send result ${show(sendResult)}`);
    delivered = await inboxB.next((m) => m?.meta?.correlationId === "interop-corr-1", "message at B");
    expect(delivered.from === A(), `from = ${show(delivered.from)}, want A's agent id ${A()}`);
    expect(isDeepStrictEqual(delivered.payload, richPayload), `payload changed: ${show(delivered.payload)}`);
    expect(delivered.meta.priority === "high", `meta.priority ${show(delivered.meta)}`);
    expect(delivered.meta.expectsResponse === true, `meta.expectsResponse ${show(delivered.meta)}`);
    expect(delivered.meta._meta?.trace === "t-1", `meta._meta ${show(delivered.meta)}`);
    expect(typeof delivered.id === "string" && delivered.id !== "", `message id missing: ${show(delivered)}`);
    return `messageId ${sendResult.messageId}`;
  });
  await check("map/send result messageId equals the delivered Message.id and lists B in delivered[]", async () => {
    expect(okSend, "send step failed");
    expect(delivered.id === sendResult.messageId, `delivered id ${delivered.id} != result ${sendResult.messageId}`);
    expect(Array.isArray(sendResult.delivered) && sendResult.delivered.includes(B()), `delivered ${show(sendResult.delivered)}`);
  });
  await check("B reply() reaches A correlated (correlationId kept, isResult, from = B)", async () => {
    expect(okSend, "send step failed");
    await state.b.reply(delivered, { answer: "pong", echo: delivered.payload.text });
    const r = await inboxA.next((m) => m?.meta?.correlationId === "interop-corr-1", "reply at A");
    expect(r.from === B(), `from = ${show(r.from)}, want ${B()}`);
    expect(r.meta.isResult === true, `meta.isResult ${show(r.meta)}`);
    expect(isDeepStrictEqual(r.payload, { answer: "pong", echo: richPayload.text }), `payload ${show(r.payload)}`);
  });
  await check("reply() without a correlationId is correlated by the original message id", async () => {
    const s = await state.a.send({ agent: B() }, { ping: 2 });
    const m = await inboxB.next((x) => x?.payload?.ping === 2, "second message at B");
    await state.b.reply(m, { pong: 2 });
    const r = await inboxA.next((x) => x?.payload?.pong === 2, "second reply at A");
    expect(r.meta?.correlationId === s.messageId, `reply correlationId ${show(r.meta?.correlationId)}, want ${s.messageId}`);
  });
  await check("300 KiB payload A → B delivered intact", async () => {
    const blob = "z".repeat(300 * 1024);
    await state.a.send({ agent: B() }, { blob, tag: "large" });
    const m = await inboxB.next((x) => x?.payload?.tag === "large", "large message at B");
    expect(m.payload.blob === blob, `blob length ${m.payload.blob?.length}`);
  });
} else {
  skip("messaging", "agent A or B did not connect");
}

// ---------------------------------------------------------------- subscriptions
const subEvents = new Inbox();
const rawEvents = () => clientWire.items.filter((f) => f.method === "map/event").map((f) => f.params);
if (okClient) {
  let c;
  const okSub = await check("client map/subscribe {eventTypes:[agent_registered, agent_state_changed]}", async () => {
    state.sub = await state.client.subscribe({
      eventTypes: [EVENT_TYPES.AGENT_REGISTERED, EVENT_TYPES.AGENT_STATE_CHANGED],
    });
    state.sub.on("event", (ev) => subEvents.push(ev));
    expect(typeof state.sub.id === "string" && state.sub.id !== "", `subscriptionId ${show(state.sub.id)}`);
    return `subscription ${state.sub.id}`;
  });
  if (okSub) {
    const registeredId = (ev) => ev?.data?.agent?.id ?? ev?.data?.agentId;
    const okReg = await check("agent_registered event for agent C registered after subscribing", async () => {
      c = await AgentConnection.connect(url, { name: "agent-c", role: "late" });
      state.c = c;
      closers.push(() => c.disconnect());
      const ev = await subEvents.next(
        (e) => e?.type === EVENT_TYPES.AGENT_REGISTERED && registeredId(e) === c.agentId,
        `agent_registered for ${c.agentId}`,
      );
      expect(typeof ev.id === "string" && typeof ev.timestamp === "number", `event lacks id/timestamp: ${show(ev)}`);
      return `data ${show(ev.data).slice(0, 120)}`;
    });
    await check("agent_state_changed event when C updates its state to busy", async () => {
      expect(okReg, "agent C did not register");
      const agent = await c.updateState("busy");
      expect(agent?.state === "busy", `map/agents/update returned ${show(agent)}`);
      const ev = await subEvents.next(
        (e) => e?.type === EVENT_TYPES.AGENT_STATE_CHANGED && (e.data?.agentId ?? e.data?.agent?.id) === c.agentId,
        `agent_state_changed for ${c.agentId}`,
      );
      const cur = ev.data?.current ?? ev.data?.agent?.state ?? ev.data?.state;
      expect(cur === "busy", `new state in event data is ${show(cur)}: ${show(ev.data)}`);
    });
    await check("map/event envelopes: subscriptionId, sequenceNumber 1,2,… without gaps, unique eventIds", async () => {
      const env = rawEvents().filter((p) => p?.subscriptionId === state.sub.id);
      expect(env.length >= 2, `only ${env.length} map/event for the subscription`);
      env.forEach((p, i) => {
        expect(p.sequenceNumber === i + 1, `event #${i + 1} has sequenceNumber ${show(p.sequenceNumber)}`);
        expect(typeof p.eventId === "string" && p.eventId !== "", `event #${i + 1} lacks eventId`);
        expect(p.event && typeof p.event.type === "string", `event #${i + 1} lacks event.type`);
      });
      const ids = new Set(env.map((p) => p.eventId));
      expect(ids.size === env.length, "duplicate eventIds");
      const notUlid = env.filter((p) => !ulidRe.test(p.eventId)).map((p) => p.eventId);
      expect(notUlid.length === 0, `eventIds are not 26-char ULIDs: ${show(notUlid)}`);
      return `${env.length} events`;
    });
    await check("subscription filter honoured (only the requested event types)", async () => {
      const types = rawEvents().map((p) => p.event?.type);
      const other = types.filter((t) => t !== EVENT_TYPES.AGENT_REGISTERED && t !== EVENT_TYPES.AGENT_STATE_CHANGED);
      expect(other.length === 0, `unexpected types ${show(other)}`);
    });
  }
} else {
  skip("subscriptions", "client did not connect");
}

// ---------------------------------------------------------------- agent resume
if (okA && okB) {
  const old = { session: state.aConnect.sessionId, token: state.aConnect.resumeToken, id: A() };
  let a2;
  const inboxA2 = new Inbox();
  const okResume = await check("agent A resumes after an abrupt socket loss: reconnected, same session and agent", async () => {
    expect(typeof old.token === "string" && old.token !== "",
      `map/connect result has no resumeToken (${show(state.aConnect)}); an AgentConnection can only resume with it`);
    const closed = new Promise((r) => state.aWs.once("close", r));
    state.aWs.terminate(); // no close frame: like a crashed process or a cut cable
    await closed;
    const ws = await openSocket();
    a2 = new AgentConnection(websocketStream(ws), { name: "agent-a", role: "requester", defaultTimeout: STEP_MS });
    a2.onMessage((m) => inboxA2.push(m));
    closers.push(() => a2.disconnect());
    const { connection, agent } = await a2.connect({ agentId: old.id, resumeToken: old.token });
    expect(connection.reconnected === true, `reconnected = ${show(connection.reconnected)}`);
    expect(connection.sessionId === old.session, `sessionId ${connection.sessionId}, want ${old.session}`);
    expect(agent?.id === old.id, `agent ${show(agent)}`);
    return `session ${connection.sessionId}`;
  });
  if (okResume) {
    await check("resumed agent A is still registered (client get + list show it once)", async () => {
      const g = await state.client.getAgent(old.id);
      expect(g?.agent?.id === old.id, `get ${show(g)}`);
      const l = await state.client.listAgents();
      const n = l.agents.filter((x) => x.id === old.id).length;
      expect(n === 1, `A listed ${n} times`);
      return `state ${g.agent.state}`;
    });
    await check("resumed agent A is reachable: B → A delivered to the new socket, A's reply reaches B", async () => {
      await state.b.send({ agent: old.id }, { after: "resume" }, { correlationId: "interop-corr-2" });
      const m = await inboxA2.next((x) => x?.meta?.correlationId === "interop-corr-2", "message at resumed A");
      expect(m.from === B(), `from ${show(m.from)}`);
      await a2.reply(m, { ok: true });
      const r = await inboxB.next((x) => x?.meta?.correlationId === "interop-corr-2", "reply from resumed A at B");
      expect(r.from === old.id, `reply from ${show(r.from)}`);
    });
  } else {
    skip("resumed agent checks", "resume failed");
  }
} else {
  skip("agent resume", "agent A or B did not connect");
}

// ---------------------------------------------------------------- client resume + replay
if (okClient && state.sub && state.c) {
  await check("client resumes with sessionId + resumeToken and map/replay returns what it missed", async () => {
    const old = state.clientConnect;
    const lastEventId = state.sub.lastEventId;
    expect(typeof lastEventId === "string", "no eventId seen on the subscription");
    const closed = new Promise((r) => state.clientWs.once("close", r));
    state.clientWs.terminate();
    await closed;
    await state.c.updateState("idle"); // happens while the client is away
    const ws = await openSocket();
    const client2 = new ClientConnection(websocketStream(ws), { name: "interop-client", defaultTimeout: STEP_MS });
    closers.push(() => client2.disconnect());
    const r = await client2.connect({ sessionId: old.sessionId, resumeToken: old.resumeToken });
    expect(r.reconnected === true, `reconnected = ${show(r.reconnected)}`);
    expect(r.sessionId === old.sessionId, `sessionId ${r.sessionId}, want ${old.sessionId}`);
    const filter = { eventTypes: [EVENT_TYPES.AGENT_STATE_CHANGED] };
    const rep = await client2.replay({ afterEventId: lastEventId, filter });
    expect(Array.isArray(rep?.events) && typeof rep.hasMore === "boolean", `replay result ${show(rep)}`);
    const hit = rep.events.find(
      (e) => (e.event?.data?.agentId ?? e.event?.data?.agent?.id) === state.c.agentId &&
        (e.event?.data?.current ?? e.event?.data?.agent?.state) === "idle",
    );
    expect(hit, `missed idle transition not replayed: ${show(rep.events)}`);
    expect(typeof hit.eventId === "string" && hit.eventId !== lastEventId, `replayed eventId ${show(hit.eventId)}`);
  });
} else {
  skip("client resume", "client, subscription or agent C missing");
}

// ---------------------------------------------------------------- auth
// The Go test creates an API key and a bearer token (JWT signed by an
// issuer the node trusts) and passes them in the environment.
const bearer = process.env.INTEROP_BEARER;
const apiKey = process.env.INTEROP_API_KEY;
if (bearer && apiKey) {
  await check("AgentConnection.connect(url) with a bearer token (JWT) registers as the token's subject", async () => {
    const ag = await AgentConnection.connect(url, { name: "agent-jwt", auth: { method: "bearer", token: bearer } });
    closers.push(() => ag.disconnect());
    expect(ag.isConnected, "not connected");
    const c = await ClientConnection.connect(url, { name: "jwt-check", auth: { method: "bearer", token: bearer } });
    closers.push(() => c.disconnect());
    const { agents } = await c.listAgents();
    const mine = agents.find((a) => a.name === "agent-jwt");
    expect(mine?.ownerId === "interop-jwt", `agent-jwt ${show(mine)}, want owner interop-jwt`);
    return `agent ${mine.id} owned by ${mine.ownerId}`;
  });
  await check("ClientConnection.connect() with an API key reports the key's principal", async () => {
    const ws = await openSocket();
    const c = new ClientConnection(websocketStream(ws), { name: "key-client", defaultTimeout: STEP_MS });
    closers.push(() => c.disconnect());
    const r = await c.connect({ auth: { method: "api-key", credential: apiKey } });
    expect(typeof r.principal?.id === "string" && r.principal.id.startsWith("key:"), `principal ${show(r.principal)}`);
    return `principal ${r.principal.id}`;
  });
  await check("a wrong API key is refused with 1001", async () => {
    const ws = await openSocket();
    const c = new ClientConnection(websocketStream(ws), { name: "bad-key", defaultTimeout: STEP_MS });
    closers.push(() => c.disconnect());
    try {
      await c.connect({ auth: { method: "api-key", credential: apiKey.slice(0, -4) + "AAAA" } });
    } catch (e) {
      expect(e?.code === 1001, `error ${errText(e)}, want 1001`);
      return;
    }
    throw new Expectation("connect with a wrong key succeeded");
  });
} else {
  skip("auth", "INTEROP_BEARER and INTEROP_API_KEY not set");
}

// ---------------------------------------------------------------- teardown
clearTimeout(deadline);
for (const close of closers.reverse()) {
  try {
    await Promise.race([close(), new Promise((r) => setTimeout(r, 1000))]);
  } catch {
    // best effort: the node may already have dropped the connection
  }
}
summary();
process.exit(failures() > 0 ? 1 : 0);
