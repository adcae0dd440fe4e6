// Agents and scopes page: the agent directory (state, role, owner, home
// node, scopes) with filters, the scopes, and the metadata of recent
// messages (who sent what to whom and whether it was delivered; never
// payloads). Data comes from the Store, kept current by MAP events.
import { h, replace, table, statusBadge, time, address, plural, throttle } from './dom.js';

export function agentsPage(main, { store }) {
  const q = h('input', { type: 'search', id: 'agent-q', placeholder: 'id, name or role' });
  const state = h('select', { id: 'agent-state' });
  const scope = h('select', { id: 'agent-scope' });
  const node = h('select', { id: 'agent-node' });
  const agentsBox = h('div', { id: 'agents' });
  const scopesBox = h('div', { id: 'scopes' });
  const msgsBox = h('div', { id: 'messages' });
  const note = h('p', { class: 'msg error', role: 'alert' });
  main.append(
    h('h2', null, 'Agents and scopes'),
    h('section', { class: 'panel', 'aria-labelledby': 'agents-h' },
      h('h3', { id: 'agents-h' }, 'Agents'),
      h('div', { class: 'filters', role: 'search', 'aria-label': 'Filter agents' },
        field('agent-q', 'Search', q), field('agent-state', 'State', state),
        field('agent-scope', 'Scope', scope), field('agent-node', 'Node', node)),
      agentsBox, note),
    h('div', { class: 'grid2' },
      h('section', { class: 'panel', 'aria-labelledby': 'messages-h' },
        h('h3', { id: 'messages-h' }, 'Recent messages'),
        h('p', { class: 'muted' }, 'Metadata of messages routed through the node this console is connected to, newest first; payloads are not shown.'),
        msgsBox),
      h('section', { class: 'panel', 'aria-labelledby': 'scopes-h' },
        h('h3', { id: 'scopes-h' }, 'Scopes'), scopesBox)),
  );
  for (const el of [q, state, scope, node]) el.addEventListener('input', renderAgents);

  function options(select, label, values) {
    const key = [...values].sort().join('\n');
    if (select.dataset.key === key) return; // unchanged: leave an open list alone
    select.dataset.key = key;
    const keep = select.value;
    replace(select, h('option', { value: '' }, `All ${label}`), [...values].sort().map((v) => h('option', { value: v }, v)));
    select.value = values.has(keep) ? keep : '';
  }

  function renderAgents() {
    const agents = store.agents;
    options(state, 'states', new Set(agents.map((a) => a.state)));
    options(scope, 'scopes', new Set(store.scopes.map((s) => s.id)));
    options(node, 'nodes', new Set(Object.values(store.homes).filter(Boolean)));
    const text = q.value.trim().toLowerCase();
    const shown = agents.filter((a) =>
      (!text || [a.id, a.name, a.role].some((v) => v && v.toLowerCase().includes(text))) &&
      (!state.value || a.state === state.value) &&
      (!scope.value || (a.scopes || []).includes(scope.value)) &&
      (!node.value || store.homes[a.id] === node.value));
    note.textContent = store.errors.agents || '';
    replace(agentsBox, table({
      caption: `${shown.length} of ${plural(agents.length, 'agent')}`,
      label: 'Agents',
      columns: [
        { title: 'Agent', rowHeader: true, cell: (a) => h('span', null, h('span', { class: 'mono' }, a.id), a.name && a.name !== a.id ? h('span', { class: 'muted' }, ` (${a.name})`) : null) },
        { title: 'State', cell: (a) => statusBadge(a.state) },
        { title: 'Role', cell: (a) => a.role || '—' },
        { title: 'Owner', cell: (a) => (a.ownerId ? h('span', { class: 'mono' }, a.ownerId) : statusBadge('orphaned')) },
        { title: 'Node', cell: (a) => store.homes[a.id] || '—' },
        { title: 'Scopes', cell: (a) => (a.scopes || []).join(', ') || '—' },
        { title: 'Recent messages', num: true, wide: true, cell: (a) => messagesOf(a.id) },
        { title: 'Last active', wide: true, cell: (a) => time((a.lifecycle || {}).lastActiveAt || (a.lifecycle || {}).createdAt) },
      ],
      rows: shown,
      rowAttrs: (a) => ({ 'data-agent': a.id }),
      empty: agents.length ? 'No agent matches the filters.' : 'No agents are registered.',
    }));
    replace(scopesBox, table({
      caption: plural(store.scopes.length, 'scope'),
      label: 'Scopes',
      columns: [
        { title: 'Scope', rowHeader: true, cell: (s) => h('span', { class: 'mono' }, s.id) },
        { title: 'Members', num: true, cell: (s) => membersOf(s).length },
        { title: 'Visibility', cell: (s) => s.visibility || 'public' },
        { title: 'Join', cell: (s) => s.joinPolicy || 'open' },
      ],
      rows: store.scopes,
      empty: 'No scopes.',
    }));
  }

  // messagesOf counts the recent messages an agent sent or received.
  function messagesOf(id) {
    return store.messages.filter((m) => m.from === id || address(m.to) === id || (m.deliveredTo || []).includes(id)).length;
  }

  function membersOf(s) {
    return s.members || store.agents.filter((a) => (a.scopes || []).includes(s.id)).map((a) => a.id);
  }

  function renderMessages() {
    replace(msgsBox, table({
      caption: plural(store.messages.length, 'recent message'),
      label: 'Recent messages',
      columns: [
        { title: 'Time', cell: (m) => time(m.at) },
        { title: 'From', cell: (m) => h('span', { class: 'mono' }, m.from || '—') },
        { title: 'To', cell: (m) => h('span', { class: 'mono' }, address(m.to)) },
        { title: 'Outcome', cell: (m) => statusBadge(m.outcome) },
        { title: 'Correlation', wide: true, cell: (m) => (m.correlationId ? h('span', { class: 'mono' }, m.correlationId) : '—') },
      ],
      rows: store.messages,
      empty: 'No messages seen since the console opened.',
    }));
  }

  store.addEventListener('agents', renderAgents);
  const onMessages = throttle(() => { renderMessages(); renderAgents(); }, 250);
  store.addEventListener('messages', onMessages);
  renderAgents();
  renderMessages();
  store.refreshAgents();
  return {
    stop() {
      store.removeEventListener('agents', renderAgents);
      store.removeEventListener('messages', onMessages);
    },
  };
}

function field(id, text, control) {
  return h('div', null, h('label', { for: id }, text), control);
}
