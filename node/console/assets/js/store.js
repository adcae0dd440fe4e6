// Store holds what several pages show and keeps it current: the runs list
// (x-concord/runs/list, refreshed on run events), the agent directory and
// scopes (map/agents/list, map/scopes/list, /v1/placement, refreshed on
// registry events) and recent message metadata (message_* events, without
// payloads). Its three MAP subscriptions are made once and live as long as
// the page: MapClient resumes them after a failover.
import { throttle } from './dom.js';

const maxMessages = 50;

export class Store extends EventTarget {
  constructor(map, nodes) {
    super();
    this.map = map;
    this.nodes = nodes;
    this.runs = [];
    this.agents = [];
    this.scopes = [];
    this.homes = {};
    this.messages = [];
    this.errors = {};
    this.refreshRuns = throttle(() => this.loadRuns(), 400);
    this.refreshAgents = throttle(() => this.loadAgents(), 400);
  }

  start() {
    // A subscribe that fails now (the connection dropped) is made again
    // when the client reconnects.
    const later = (err) => console.debug('subscribe deferred', err);
    this.map.subscribe({ filter: { eventTypes: ['x-concord.run.*'] } }, (ev) => {
      this.dispatchEvent(new CustomEvent('runEvent', { detail: ev }));
      this.refreshRuns();
    }, { replay: true }).catch(later);
    this.map.subscribe({ filter: { eventTypes: ['agent.*', 'scope.*', 'participant.*'] } }, () => this.refreshAgents(), { replay: true }).catch(later);
    this.map.subscribe({ filter: { eventTypes: ['message.*'] } }, (ev) => this.addMessage(ev)).catch(later);
    this.map.addEventListener('connected', () => {
      this.refreshRuns();
      this.refreshAgents();
    });
  }

  emit(name) {
    this.dispatchEvent(new Event(name));
  }

  async loadRuns() {
    try {
      const res = await this.map.request('x-concord/runs/list', { limit: 100 });
      this.runs = res.runs || [];
      this.errors.runs = '';
    } catch (err) {
      this.errors.runs = err.message;
    }
    this.emit('runs');
  }

  async loadAgents() {
    try {
      const [agents, scopes] = await Promise.all([
        this.map.request('map/agents/list', { limit: 1000 }),
        this.map.request('map/scopes/list', {}),
      ]);
      this.agents = agents.agents || [];
      this.scopes = scopes.scopes || [];
      this.errors.agents = '';
    } catch (err) {
      this.errors.agents = err.message;
    }
    try {
      const res = await this.nodes.get('/v1/placement');
      this.homes = Object.fromEntries((res.agents || []).map((a) => [a.id, a.homeNode]));
    } catch (err) {
      this.errors.agents = `placement: ${err.message}`;
    }
    this.emit('agents');
  }

  addMessage(ev) {
    const d = ev.data || {};
    const m = this.messages.find((x) => x.messageId === d.messageId && d.messageId);
    const row = m || { messageId: d.messageId, from: d.from, to: d.to, at: d.timestamp || ev.timestamp,
      correlationId: d.correlationId, priority: d.priority, outcome: 'sent', deliveredTo: [] };
    if (ev.type === 'message_delivered') { row.outcome = 'delivered'; row.deliveredTo = d.deliveredTo || []; }
    if (ev.type === 'message_failed') { row.outcome = 'failed'; row.reason = d.reason; }
    if (!m) {
      this.messages.unshift(row);
      this.messages.length = Math.min(this.messages.length, maxMessages);
    }
    this.emit('messages');
  }
}
