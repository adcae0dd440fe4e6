// MapClient speaks MAP (JSON-RPC 2.0 over WebSocket) to the current node
// as a `client` participant. It keeps its session across node failures:
// when the connection drops it reconnects to the next member Nodes lists
// and resumes with sessionId + resumeToken, which restores its
// subscriptions (same ids) and replays the events it missed. Should a
// node refuse the resume, it opens a fresh session and subscribes again
// from the last event it saw.

const callTimeoutMs = 10000;
const pingEveryMs = 3000;
const pingTimeoutMs = 4000;
// authCodes are the map/connect errors a credential can fix: 1000
// required, 1001 invalid, 1002 expired, 1003 the participant type or id
// is not allowed with it.
const authCodes = new Set([1000, 1001, 1002, 1003]);

export class MapError extends Error {
  constructor(err) {
    super(err.message || 'MAP error');
    this.code = err.code;
    this.data = err.data;
  }
}

export class MapClient extends EventTarget {
  constructor(nodes) {
    super();
    this.nodes = nodes;
    this.ws = null;
    this.nextId = 1;
    this.pending = new Map(); // id → {resolve, reject, timer}
    this.session = null; // {sessionId, resumeToken}
    this.subs = []; // {params, onEvent, id, lastEventId}
    this.state = 'connecting';
    this.nodeId = '';
    this.origin = '';
    this.lastHeard = 0;
    this.attempt = 0;
    this.auth = null; // {method: 'api-key'|'bearer', token, participantType?}: sent in map/connect when set
    this.waitingForAuth = false;
  }

  // setCredential sets the credential map/connect sends (null: none) and,
  // when the node had asked for one, tries again with it.
  setCredential(auth) {
    this.auth = auth && auth.token
      ? { method: auth.method, token: auth.token, participantType: auth.participantType === 'system' ? 'system' : 'client' }
      : null;
    if (this.waitingForAuth && !this.stopped) {
      this.waitingForAuth = false;
      this.session = null;
      this.setState('connecting');
      this.connectLoop();
    }
  }

  start() {
    this.stopped = false;
    this.connectLoop();
    this.pinger = setInterval(() => this.ping(), pingEveryMs);
  }

  // stop closes the connection for good (the page is going away, or a
  // test is done).
  stop() {
    this.stopped = true;
    clearInterval(this.pinger);
    const ws = this.ws;
    this.ws = null;
    if (ws) ws.close();
  }

  setState(state) {
    this.state = state;
    this.dispatchEvent(new CustomEvent('state', { detail: { state, nodeId: this.nodeId, origin: this.origin } }));
  }

  // connectLoop tries the candidate nodes in turn, with a short backoff
  // between passes, until one accepts map/connect.
  async connectLoop() {
    while (!this.stopped) {
      for (const origin of this.nodes.candidates()) {
        if (this.stopped) return;
        try {
          await this.connectTo(origin);
          this.attempt = 0;
          return;
        } catch (err) {
          console.debug('connect failed', origin, err);
          if (err instanceof MapError && authCodes.has(err.code)) {
            // The node wants a (valid) credential: every member would say
            // the same, so wait for one instead of retrying.
            this.waitingForAuth = true;
            this.setState('auth');
            this.dispatchEvent(new CustomEvent('auth-required', { detail: { code: err.code, message: err.message, hadCredential: !!this.auth } }));
            return;
          }
        }
      }
      this.attempt++;
      await new Promise((r) => setTimeout(r, Math.min(250 * 2 ** this.attempt, 2000)));
    }
  }

  // connectTo opens a connection to origin and runs map/connect on it. It
  // resolves once the session is up; only a connection that got that far
  // starts a new connectLoop when it closes (a failed attempt is the
  // running loop's business).
  connectTo(origin) {
    return new Promise((resolve, reject) => {
      const url = origin.replace(/^http/, 'ws') + '/map';
      const ws = new WebSocket(url);
      let settled = false;
      let established = false;
      const fail = (err) => {
        if (settled) return;
        settled = true;
        if (this.ws === ws) this.ws = null;
        try { ws.close(); } catch (_) { /* already closed */ }
        reject(err);
      };
      const timer = setTimeout(() => fail(new Error('connect timeout')), pingTimeoutMs);
      ws.onopen = async () => {
        this.ws = ws;
        try {
          const res = await this.handshake();
          await this.resubscribe(!!res.reconnected);
          if (settled) return; // timed out meanwhile
          clearTimeout(timer);
          settled = true;
          established = true;
          this.origin = origin;
          this.nodeId = (res.systemInfo && res.systemInfo.nodeId) || '';
          this.nodes.setCurrent(origin);
          this.lastHeard = Date.now();
          this.setState('open');
          this.dispatchEvent(new CustomEvent('connected', { detail: { nodeId: this.nodeId, origin, reconnected: !!res.reconnected } }));
          resolve();
        } catch (err) {
          clearTimeout(timer);
          fail(err);
        }
      };
      ws.onmessage = (ev) => this.onFrame(ws, ev.data);
      ws.onerror = () => fail(new Error('websocket error'));
      ws.onclose = () => {
        clearTimeout(timer);
        this.failPending(ws, new Error('connection lost'));
        if (!established) {
          fail(new Error('closed during connect'));
          return;
        }
        if (this.ws === ws) {
          this.ws = null;
          this.setState('reconnecting');
          this.connectLoop();
        }
      };
    });
  }

  async handshake() {
    // An operator's credential may connect as a system participant, which
    // sees every agent, scope and message; anyone else is a client and sees
    // what MAP's visibility rules let it see.
    const base = { protocolVersion: 1, participantType: (this.auth && this.auth.participantType) || 'client', name: 'concord console' };
    if (this.auth) base.auth = { method: this.auth.method, token: this.auth.token };
    if (this.session) {
      try {
        const res = await this.call('map/connect', { ...base, ...this.session });
        this.session = { sessionId: res.sessionId, resumeToken: res.resumeToken || this.session.resumeToken };
        return res;
      } catch (err) {
        if (!(err instanceof MapError) || err.code !== 1001) throw err;
        // The resume was refused: start afresh and subscribe again.
        for (const s of this.subs) s.id = null;
      }
    }
    const res = await this.call('map/connect', base);
    this.session = { sessionId: res.sessionId, resumeToken: res.resumeToken };
    return { ...res, reconnected: false };
  }

  // resubscribe (re)creates the subscriptions a session lacks: all of them
  // on a fresh session, those replaying from the replicated event log
  // starting after the last event they saw; after a resume (which restored
  // the others) only those made while offline. A subscription the node
  // refuses is left for the next connect rather than failing this one.
  async resubscribe(resumed) {
    for (const s of this.subs) {
      if (resumed && s.id) continue;
      s.id = null;
      const params = { ...s.params };
      if (s.replay && s.lastEventId) params.replayFrom = s.lastEventId;
      try {
        s.id = (await this.call('map/subscribe', params)).subscriptionId;
      } catch (err) {
        if (!(err instanceof MapError)) throw err; // the connection is gone
        if (!params.replayFrom) { console.debug('subscribe refused', err); continue; }
        // The event aged out of the node's window: follow from now (the
        // pages reload their data on 'connected').
        try {
          s.id = (await this.call('map/subscribe', s.params)).subscriptionId;
        } catch (err2) {
          if (!(err2 instanceof MapError)) throw err2;
          console.debug('subscribe refused', err2);
        }
      }
    }
  }

  onFrame(ws, data) {
    if (ws !== this.ws) return;
    this.lastHeard = Date.now();
    let msg;
    try { msg = JSON.parse(data); } catch (_) { return; }
    for (const m of Array.isArray(msg) ? msg : [msg]) this.onMessage(m);
  }

  onMessage(m) {
    if (m.id !== undefined && m.id !== null && (m.result !== undefined || m.error !== undefined)) {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      clearTimeout(p.timer);
      if (m.error) p.reject(new MapError(m.error));
      else p.resolve(m.result);
      return;
    }
    if (m.method === 'map/event' && m.params) {
      const s = this.subs.find((x) => x.id === m.params.subscriptionId);
      if (!s) return;
      if (m.params.eventId) s.lastEventId = m.params.eventId;
      s.onEvent(m.params.event || {}, m.params);
      return;
    }
    if (m.id !== undefined && m.method) {
      // The console serves no methods.
      this.send({ jsonrpc: '2.0', id: m.id, error: { code: -32601, message: 'Method not found' } });
    }
  }

  send(obj) {
    if (!this.ws || this.ws.readyState !== WebSocket.OPEN) throw new Error('not connected');
    this.ws.send(JSON.stringify(obj));
  }

  // call sends a request and resolves with its result (MapError on a MAP
  // error, Error when the connection is lost first or it times out).
  call(method, params, timeoutMs = callTimeoutMs) {
    return new Promise((resolve, reject) => {
      const id = this.nextId++;
      const ws = this.ws;
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer, ws });
      try {
        this.send({ jsonrpc: '2.0', id, method, params: params || {} });
      } catch (err) {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(err);
      }
    });
  }

  // request waits for a connection, then calls (for pages that load data
  // while the client is still reconnecting).
  async request(method, params) {
    if (this.state !== 'open') await this.whenOpen();
    return this.call(method, params);
  }

  whenOpen() {
    if (this.state === 'open') return Promise.resolve();
    return new Promise((resolve) => {
      const on = () => { this.removeEventListener('connected', on); resolve(); };
      this.addEventListener('connected', on);
    });
  }

  failPending(ws, err) {
    for (const [id, p] of this.pending) {
      if (p.ws === ws) {
        clearTimeout(p.timer);
        this.pending.delete(id);
        p.reject(err);
      }
    }
  }

  // subscribe registers a subscription for the whole life of the page:
  // it is created now (or on connect) and survives reconnects. replay
  // says its events are in the replicated log (registry and run events),
  // so a new session can pick up after the last one seen; message events
  // are not.
  async subscribe(params, onEvent, { replay = false } = {}) {
    const s = { params, onEvent, replay, id: null, lastEventId: '' };
    this.subs.push(s);
    if (this.state === 'open') {
      const res = await this.call('map/subscribe', params);
      s.id = res.subscriptionId;
    }
    return s;
  }

  // ping checks that a quiet connection still answers; a node that died
  // without closing the socket is left after pingTimeoutMs.
  async ping() {
    const ws = this.ws;
    if (!ws || this.state !== 'open' || Date.now() - this.lastHeard < pingEveryMs) return;
    try {
      await this.call('x-concord/runs/list', { limit: 1 }, pingTimeoutMs);
    } catch (err) {
      if (err instanceof MapError || ws !== this.ws) return;
      console.debug('node stopped answering; reconnecting', err);
      ws.close();
    }
  }
}
