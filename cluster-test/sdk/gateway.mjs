// Interop check: the official SDK's GatewayConnection federating a foreign
// MAP system ("lab") into a Concord system, unchanged.
//
//   GW_URL=ws://dc1-node-0/map AGENT_URL=ws://dc1-node-1/map PEER_URL=ws://dc2/map \
//   GW_KEY=map_sk_... SELF=dc1 PEER=dc2 LAB=lab node gateway.mjs
//
// GW_KEY is an API key for a gateway allowed to route for LAB to SELF and
// PEER (PEER is a Concord system linked to SELF). One PASS/FAIL/SKIP line per
// check, then "N passed, N failed, N skipped"; exit 0 only if nothing failed.
// GatewayConnection has no API to receive messages, so replies routed back
// to the gateway are read from its socket (map/message notifications).
import { Expectation, Inbox, STEP_MS, check, deadline, errText, expect, failures, show, summary, tapSocket } from "./checks.mjs";
import WS from "ws";

const { AgentConnection, BaseConnection, GatewayConnection, createFederationEnvelope, processFederationEnvelope, websocketStream, waitForOpen } =
  await import("@multi-agent-protocol/sdk");

const env = (k) => {
  const v = process.env[k];
  if (!v) {
    console.error(`gateway.mjs: ${k} is required (see the header)`);
    process.exit(64);
  }
  return v;
};
const [gwURL, agentURL, peerURL, key, SELF, PEER, LAB] = ["GW_URL", "AGENT_URL", "PEER_URL", "GW_KEY", "SELF", "PEER", "LAB"].map(env);
const timer = deadline(Number(process.env.INTEROP_TIMEOUT_MS || 30000));
const closers = [];

async function open(url, tap) {
  const ws = new WS(url);
  await waitForOpen(ws, STEP_MS);
  if (tap) tapSocket(ws, tap);
  return ws;
}

// expectCode runs a request that must fail with a MAP error code.
async function expectCode(code, fn) {
  try {
    const r = await fn();
    throw new Expectation(`want error ${code}, got result ${show(r)}`);
  } catch (e) {
    if (e instanceof Expectation) throw e;
    expect(e?.code === code, `want error ${code}, got ${e?.code} ${e?.message}`);
    return `${code} ${e.message}`;
  }
}

// An echoing agent: answers every message with reply().
async function echoAgent(url, name) {
  const inbox = new Inbox();
  const agent = await AgentConnection.connect(url, { name });
  closers.push(() => agent.disconnect());
  agent.onMessage((m) => {
    inbox.push(m);
    // A reply may still be in flight when the script closes the gateway
    // it goes to; its failure is not a check.
    agent.reply(m, { echo: m.payload, by: name }).catch((e) => console.log(`reply by ${name}: ${errText(e)}`));
  });
  return { agent, inbox };
}

let bob, carol;
const agentsOK = await check(`echo agents: bob on ${PEER}, carol on ${SELF} (AgentConnection.connect)`, async () => {
  bob = await echoAgent(peerURL, "bob");
  carol = await echoAgent(agentURL, "carol");
  return `bob=${bob.agent.agentId} carol=${carol.agent.agentId}`;
});

const wire = new Inbox();
let gw;
const gwOK = await check("GatewayConnection.connect with an API key (participantType gateway)", async () => {
  const ws = await open(gwURL, wire);
  gw = new GatewayConnection(websocketStream(ws), {
    name: "lab-gateway",
    routing: { systemId: LAB, maxHops: 4, trackPath: true },
    defaultTimeout: STEP_MS,
  });
  closers.push(() => gw.disconnect());
  const r = await gw.connect({ auth: { method: "api-key", token: key } });
  expect(typeof r?.sessionId === "string" && r.sessionId !== "", `no sessionId: ${show(r)}`);
  expect(r.capabilities?.federation?.canFederate === true, `federation.canFederate not granted: ${show(r.capabilities)}`);
  return `participant ${r.participantId}`;
});

if (gwOK) {
  await check(`connectToSystem(${PEER}) for the linked Concord system`, async () => {
    const r = await gw.connectToSystem(PEER, "ws://ignored.invalid/map");
    expect(r.connected === true && r.systemInfo?.name === PEER, `result ${show(r)}`);
    expect(gw.isSystemConnected(PEER), "GatewayConnection does not list the system as connected");
    return `status ${r.status}`;
  });
  await check(`connectToSystem(${SELF}) for this system`, async () => {
    const r = await gw.connectToSystem(SELF, "ws://ignored.invalid/map");
    expect(r.connected === true && r.systemInfo?.name === SELF, `result ${show(r)}`);
  });
  await check("connectToSystem(unknown) is 5001 FEDERATION_SYSTEM_NOT_FOUND", () =>
    expectCode(5001, () => gw.connectToSystem("nowhere", "ws://nowhere.invalid/map")),
  );
}

// routeAndReply routes a message from lab's alice to an echo agent and
// waits for the agent to get it and for its reply to reach the gateway.
async function routeAndReply(target, agent, id) {
  const r = await gw.routeToSystem(target, {
    id,
    from: "alice",
    to: { agent: agent.agent.agentId },
    timestamp: Date.now(),
    payload: { question: id },
  });
  expect(r?.routed === true && r.messageId === id, `route result ${show(r)}`);
  const got = await agent.inbox.next((m) => m.id === id, `${id} at ${agent.agent.agentId}`);
  expect(got.from === `${LAB}:agent:alice`, `delivered from ${show(got.from)}, want ${LAB}:agent:alice`);
  const back = await wire.next((f) => f.method === "map/message" && f.params?.message?.meta?.correlationId === id, `reply to ${id} at the gateway`);
  const m = back.params.message;
  expect(m.from === `${target}:agent:${agent.agent.agentId}`, `reply from ${show(m.from)}`);
  expect(m.to?.system === LAB && m.to?.agent === "alice", `reply to ${show(m.to)}`);
  expect(m.payload?.echo?.question === id, `reply payload ${show(m.payload)}`);
  expect(m.federation?.targetSystem === LAB, `reply federation metadata ${show(m.federation)}`);
  return `delivered ${show(r.delivered)}, reply path ${show(m.federation.path)}`;
}

if (gwOK && agentsOK) {
  await check(`routeToSystem(${PEER}) reaches bob through ${SELF}; bob's reply() comes back to the gateway`, () =>
    routeAndReply(PEER, bob, "gw-peer-1"),
  );
  await check(`routeToSystem(${SELF}) reaches carol (another node); her reply() comes back to the gateway`, () =>
    routeAndReply(SELF, carol, "gw-self-1"),
  );
}

// The SDK's own envelope helpers craft what a multi-hop path would carry;
// a raw BaseConnection (the SDK's JSON-RPC layer) sends it.
let raw;
const rawOK = await check("BaseConnection as a second gateway (map/connect)", async () => {
  raw = new BaseConnection(websocketStream(await open(gwURL)), { defaultTimeout: STEP_MS });
  closers.push(() => raw.close());
  await raw.sendRequest("map/connect", { protocolVersion: 1, participantType: "gateway", auth: { method: "api-key", token: key } });
});
if (rawOK && agentsOK) {
  const msg = (id) => ({ id, from: "alice", to: { agent: carol.agent.agentId }, timestamp: Date.now(), payload: {} });
  await check(`envelope whose path already holds ${SELF} is 5010 LOOP_DETECTED`, () => {
    const looped = processFederationEnvelope(createFederationEnvelope(msg("loop"), LAB, SELF, { maxHops: 5, trackPath: true }), {
      systemId: SELF,
      trackPath: true,
    });
    expect(looped.success, `processFederationEnvelope: ${show(looped)}`);
    return expectCode(5010, () => raw.sendRequest("map/federation/route", { systemId: SELF, envelope: looped.envelope }));
  });
  await check("envelope at its hop limit is 5011 MAX_HOPS_EXCEEDED", () => {
    let e = createFederationEnvelope(msg("hops"), LAB, SELF, { maxHops: 2, trackPath: true });
    for (const hop of ["relay-a", "relay-b"]) {
      const p = processFederationEnvelope(e, { systemId: hop, trackPath: true });
      expect(p.success, `processFederationEnvelope at ${hop}: ${show(p)}`);
      e = p.envelope;
    }
    return expectCode(5011, () => raw.sendRequest("map/federation/route", { systemId: SELF, envelope: e }));
  });
  await check("envelope claiming a source system the key does not allow is 5002", () =>
    expectCode(5002, () =>
      raw.sendRequest("map/federation/route", { systemId: SELF, envelope: createFederationEnvelope(msg("forged"), "mallory", SELF) }),
    ),
  );
  await check("deprecated bare message (no envelope) speaks for the key's one source system", async () => {
    const r = await raw.sendRequest("map/federation/route", { systemId: SELF, message: msg("bare-1") });
    expect(r?.routed === true, `result ${show(r)}`);
    const got = await carol.inbox.next((m) => m.id === "bare-1", "bare-1 at carol");
    expect(got.from === `${LAB}:agent:alice`, `from ${show(got.from)}`);
  });
  await check("nothing was delivered for the refused envelopes", () => {
    const leaked = carol.inbox.items.filter((m) => ["loop", "hops", "forged"].includes(m.id));
    expect(leaked.length === 0, `delivered ${show(leaked)}`);
  });
}

for (const close of closers.reverse()) {
  try {
    await close();
  } catch {
    // already closed
  }
}
clearTimeout(timer);
summary();
process.exit(failures() === 0 ? 0 : 1);
