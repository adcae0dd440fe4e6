// A foreign MAP system for Concord's map-link tests: the official SDK's
// reference MAPServer (@multi-agent-protocol/sdk, pinned in package.json)
// on a WebSocket port, with one SDK AgentConnection ("sdk-bob") on it that
// echoes {ask} requests with reply() and answers Concord run tasks.
//
//   node foreign.mjs PORT [API_KEY]
//
// PORT 0 picks a free port. With API_KEY the server requires it
// (map/connect auth {method: "api-key", credential}). The script prints
// JSON lines on stdout ({"event": ...}) and reads JSON commands on stdin:
//   {"cmd":"send","toName":"alice","payload":{...}}  sdk-bob sends to the
//       agent registered under that name (a Concord proxy)
//   {"cmd":"garbage"}  writes malformed, oversized and misaddressed frames
//       to every connection that registered a Concord proxy
//   {"cmd":"list","nonce":N}  prints the registered agents ({"event":"agents"})
//   {"cmd":"exit"}
//
// Host glue for two gaps of the SDK 0.1.15 MAPServer (nothing else is
// changed; map/send still drops `meta`, correlationId included):
//  1. its message router delivers through messages.onDeliver, which
//     nothing wires by default, so map/send never reaches an agent's
//     connection: wired here to the connection whose session owns the agent;
//  2. map/send stamps `from` with ctx.session.agentIds[0], but the session
//     store saves a copy on map/agents/register, so a connection's session
//     object never lists its agents and every message comes "from" the
//     sender's session id: a middleware refreshes ctx.session from the store;
//  3. a RouterConnection takes a WritableStream lock per frame, so a
//     notification written while a response is in flight (or the reverse)
//     throws "WritableStream is locked" and the frame is lost (the
//     AgentConnection then waits forever for its map/send answer): the
//     server's side of each socket gets a writer that needs no lock.
import { createInterface } from "node:readline";
import WS, { WebSocketServer } from "ws";

if (typeof globalThis.WebSocket === "undefined") globalThis.WebSocket = WS;
const { AgentConnection, websocketStream } = await import("@multi-agent-protocol/sdk");
const { MAPServer, createSimpleAPIKeyAuthenticator } = await import("@multi-agent-protocol/sdk/server");

const port = Number(process.argv[2] || 0);
const apiKey = process.argv[3] || "";
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

const refreshSession = async (_method, _params, ctx, next) => {
  const stored = ctx.session && server.sessions.get(ctx.session.id);
  if (stored) ctx.session.agentIds = stored.agentIds;
  return next();
};
const server = new MAPServer({
  name: "sdk-foreign",
  middleware: [refreshSession],
  ...(apiKey ? { auth: { required: true, authenticators: [createSimpleAPIKeyAuthenticator({ [apiKey]: "concord-test" })] } } : {}),
});
const sockets = new Map(); // router -> ws

// The session that owns an agent (the store keeps its own copy of each
// session, so a router's session object does not see agents added later).
const sessionOf = (router) => {
  try {
    return server.sessions.get(router.session.id);
  } catch {
    return undefined;
  }
};
server.messages.onDeliver((agentId, message) => {
  const owner = server.agents.get(agentId)?.sessionId;
  for (const [router, ws] of sockets) {
    if (owner && sessionOf(router)?.id === owner && ws.readyState === WS.OPEN) {
      router.notify("map/message", { message }).catch(() => {});
      return;
    }
  }
});

const wss = new WebSocketServer({ host: "127.0.0.1", port, path: "/map", maxPayload: 8 << 20 });
const serverStream = (ws) => ({
  readable: websocketStream(ws).readable,
  writable: {
    getWriter: () => ({
      write: async (m) => {
        if (ws.readyState === WS.OPEN) ws.send(JSON.stringify(m));
      },
      releaseLock() {},
      close: async () => ws.close(),
    }),
  },
});
wss.on("connection", (ws) => {
  const router = server.accept(serverStream(ws), { role: "agent" });
  sockets.set(router, ws);
  ws.on("close", () => sockets.delete(router));
  router.start();
});
await new Promise((resolve, reject) => {
  wss.once("listening", resolve);
  wss.once("error", reject);
});
const url = `ws://127.0.0.1:${wss.address().port}/map`;

// sdk-bob: answers {ask} with reply() (correlated by the SDK from the
// original message's meta, which MAPServer dropped) and reports every
// message it gets.
const bob = await AgentConnection.connect(url, {
  name: "sdk-bob",
  role: "responder",
  ...(apiKey ? { auth: { method: "api-key", credential: apiKey } } : {}),
});
// One request at a time on sdk-bob's connection: the SDK client writes
// through the same per-frame WritableStream lock, so a reply() racing a
// send() can lose one of them.
let chain = Promise.resolve();
const serial = (fn) => (chain = chain.then(fn, fn));
// answerTask answers a Concord run task (node/runs/PROTOCOL.md) the way
// the demo's persona agents do: two claims in the initial round, agreement
// afterwards, acceptance in the final vote, a short report and action.
function answerTask(task) {
  const who = task.participantId;
  if (task.kind === "report") {
    return { kind: "report", output: { mode: "representative", traceIncluded: false, traceLevel: "compact",
      finalSummary: `Outcome: ${task.reportInput?.status}.`, representativeSpeech: `Speaking for the group, ${who}.` } };
  }
  if (task.kind === "action") {
    return { kind: "action", output: { fullResponse: `${who} applied the accepted claims.`, summary: `${who} acted.` } };
  }
  const claims = task.claimCatalog ?? [];
  const output = {
    participantId: who, phase: task.phase, round: task.round,
    fullResponse: `${who}, round ${task.round} (${task.phase}): I keep the claims that hold up.`,
    summary: `${who} supports the well-founded claims.`,
    judgements: claims.map((c) => ({ claimId: c.claimId, stance: "agree", confidence: 0.8, rationale: `${who} agrees.` })),
  };
  if (task.phase === "initial") {
    output.taskTitle = "SDK agent answer";
    output.extractedClaims = [{ title: `Benefit noted by ${who}`, statement: "It brings a measurable benefit.", category: "pro" }];
  }
  if (task.phase === "final_vote") {
    output.claimVotes = claims.length ? claims.map((c) => ({ claimId: c.claimId, vote: "accept" })) : [{ claimId: "none", vote: "reject" }];
  }
  return { kind: "round", output };
}

bob.onMessage((m) => {
  out({ event: "message", id: m.id, from: m.from, payload: m.payload ?? null, meta: m.meta ?? null });
  if (m.payload?.type === "x-concord.run.task") {
    serial(() => bob.reply(m, answerTask(m.payload.task))).catch((e) =>
      out({ event: "error", what: "task", message: String(e?.message || e) }),
    );
    return;
  }
  if (m.payload && typeof m.payload === "object" && "ask" in m.payload) {
    serial(() => bob.reply(m, { answer: m.payload.ask })).catch((e) =>
      out({ event: "error", what: "reply", message: String(e?.message || e) }),
    );
  }
});
out({ event: "listening", port: wss.address().port, url, bob: bob.agentId });

const proxyNamed = (name) =>
  server.agents.list({}).find((a) => a.name === name && a.metadata?.concordProxy === true && a.state !== "stopped");

const commands = createInterface({ input: process.stdin });
commands.on("close", () => process.exit(0)); // the test is gone
commands.on("line", async (line) => {
  let cmd;
  try {
    cmd = JSON.parse(line);
  } catch {
    return out({ event: "error", what: "command", message: line });
  }
  try {
    if (cmd.cmd === "send") {
      const target = proxyNamed(cmd.toName);
      if (!target) return out({ event: "error", what: "send", message: `no proxy named ${cmd.toName}` });
      const r = await serial(() => bob.send({ agent: target.id }, cmd.payload));
      out({ event: "sent", to: target.id, messageId: r?.messageId });
    } else if (cmd.cmd === "garbage") {
      let n = 0;
      for (const [router, ws] of sockets) {
        const ids = sessionOf(router)?.agentIds ?? [];
        const proxy = ids.map((id) => server.agents.get(id)).find((a) => a?.metadata?.concordProxy === true);
        if (!proxy) continue;
        const msg = (message) => JSON.stringify({ jsonrpc: "2.0", method: "map/message", params: { message } });
        ws.send("{this is not json");
        ws.send(JSON.stringify([1, 2, 3]));
        ws.send(msg({ id: "g1", from: "", to: { agent: proxy.id }, payload: "no sender" }));
        ws.send(msg({ id: "g2", from: "a:b:c", to: { agent: proxy.id }, payload: "colon sender" }));
        ws.send(msg({ id: "g3", from: bob.agentId, to: { agent: proxy.id }, payload: "x".repeat(2 << 20) }));
        ws.send(msg({ id: "g4", from: bob.agentId, to: { agent: proxy.id }, payload: 1, meta: "not an object" }));
        ws.send(JSON.stringify({ jsonrpc: "2.0", method: "map/message", params: "not an object" }));
        ws.send(JSON.stringify({ jsonrpc: "2.0", id: 99, method: "map/agents/list", params: {} }));
        n++;
      }
      out({ event: "garbage-sent", connections: n });
    } else if (cmd.cmd === "list") {
      const agents = server.agents.list({}).map((a) => ({ id: a.id, name: a.name, state: a.state, proxy: a.metadata?.concordProxy === true }));
      out({ event: "agents", nonce: cmd.nonce, agents });
    } else if (cmd.cmd === "exit") {
      process.exit(0);
    }
  } catch (e) {
    out({ event: "error", what: cmd.cmd, message: String(e?.message || e) });
  }
});
