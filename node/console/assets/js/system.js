// System page: the members of the system with their gossip state, Raft
// role (leader, voter, non-voter) and each server's own Raft view (state,
// term, indexes, last contact), polled once a second from /v1: members
// and the Raft configuration from the current node, /v1/status from every
// member (a member that does not answer is shown unreachable), and the
// system's federation links as the current node sees them.
import { h, card, replace, table, statusBadge, badge } from './dom.js';

const pollMs = 1000;

export function systemPage(main, { nodes, map }) {
  const cards = h('div', { id: 'system-cards' });
  const servers = h('div', { id: 'servers' });
  const note = h('p', { class: 'msg', role: 'status', 'aria-live': 'polite' });
  const links = h('div', { id: 'fed-links' });
  main.append(
    h('h2', null, 'System'),
    cards,
    h('section', { class: 'panel', 'aria-labelledby': 'servers-h' },
      h('h3', { id: 'servers-h' }, 'Servers'),
      servers, note),
    h('section', { class: 'panel', 'aria-labelledby': 'fed-links-h' },
      h('h3', { id: 'fed-links-h' }, 'Federation links'),
      links),
  );
  let stopped = false;
  let timer = null;

  async function poll() {
    try {
      const [members, peers, fed] = await Promise.all([nodes.refreshMembers(), nodes.get('/v1/raft/peers'),
        nodes.get('/v1/federation/links').catch((err) => ({ error: err.message }))]);
      const statuses = await Promise.all(members.map((m) =>
        nodes.fetchFrom(m.origin, '/v1/status').then((s) => ({ ok: true, s }), (err) => ({ ok: false, err }))));
      if (stopped) return;
      render(members, peers, statuses);
      renderLinks(fed);
      note.textContent = '';
    } catch (err) {
      if (!stopped) note.textContent = `Cannot read the system state: ${err.message}. Retrying…`;
    }
    if (!stopped) timer = setTimeout(poll, pollMs);
  }

  function render(members, peers, statuses) {
    const byPeer = Object.fromEntries((peers.peers || []).map((p) => [p.id, p]));
    const rows = members.map((m, i) => ({ m, peer: byPeer[m.id], st: statuses[i] }));
    // Raft servers gossip does not know (yet) still belong in the table.
    for (const p of peers.peers || []) {
      if (!members.some((m) => m.id === p.id)) rows.push({ m: { id: p.id, status: 'unknown', httpAddr: '' }, peer: p, st: { ok: false } });
    }
    rows.sort((a, b) => a.m.id.localeCompare(b.m.id));
    const leader = peers.leaderId || '';
    const leaderRow = rows.find((r) => r.m.id === leader);
    const term = leaderRow && leaderRow.st.ok ? leaderRow.st.s.raft.term : '—';
    const alive = members.filter((m) => m.status === 'alive').length;
    const systemId = (members[0] && members[0].systemId) || '—';
    replace(cards, h('dl', { class: 'cards' },
      card('System', systemId),
      card('Leader', leader || 'none', { id: 'leader', 'data-leader': leader, 'aria-live': 'polite' }),
      card('Term', term),
      card('Members alive', `${alive} of ${members.length}`, { id: 'alive-count' }),
      card('Connected to', map.nodeId || nodes.current)));
    replace(servers, table({
      caption: `Raft configuration as ${peers.nodeId} sees it; indexes and last contact as each server reports them.`,
      label: 'Servers',
      columns: [
        { title: 'Node', rowHeader: true, cell: (r) => h('span', { class: 'mono' }, r.m.id) },
        { title: 'Gossip', cell: (r) => statusBadge(r.m.status) },
        { title: 'Raft role', cell: (r) => roleBadge(role(r.peer)) },
        { title: 'Raft state', cell: (r) => statusBadge(r.st.ok ? r.st.s.raft.state.toLowerCase() : 'unreachable') },
        { title: 'Term', num: true, cell: (r) => stat(r, 'term') },
        { title: 'Last log', num: true, cell: (r) => stat(r, 'last_log_index') },
        { title: 'Commit', num: true, cell: (r) => stat(r, 'commit_index') },
        { title: 'Applied', num: true, cell: (r) => stat(r, 'applied_index') },
        { title: 'Last contact', cell: (r) => (r.st.ok ? lastContact(r.st.s) : '—') },
        { title: 'Version', wide: true, cell: (r) => r.m.version || '—' },
        { title: 'HTTP', wide: true, cell: (r) => (r.m.httpAddr ? h('span', { class: 'mono' }, r.m.httpAddr) : '—') },
      ],
      rows,
      rowAttrs: (r) => ({ 'data-node': r.m.id, 'data-role': role(r.peer), 'data-gossip': r.m.status,
        class: r.m.status === 'alive' && r.st.ok ? null : 'dead' }),
      empty: 'No members known.',
    }));
  }

  function renderLinks(fed) {
    if (fed.error) {
      replace(links, h('p', { class: 'msg error' }, `Cannot read the federation links: ${fed.error}`));
      return;
    }
    replace(links, table({
      caption: `Links to other systems as ${fed.nodeId} sees them: its own stream's state, round trip and queue.`,
      label: 'Federation links',
      columns: [
        { title: 'Peer system', rowHeader: true, cell: (l) => h('span', { class: 'mono' }, l.peerSystemId) },
        { title: 'State', cell: (l) => statusBadge(l.state) },
        { title: 'Streams', num: true, cell: (l) => String(l.streamsUp) },
        { title: 'RTT', num: true, cell: (l) => rtt(l.rttUs) },
        { title: 'Queue', num: true, cell: (l) => String(l.queueDepth) },
        { title: 'Sent', num: true, cell: (l) => String(l.sent) },
        { title: 'Received', num: true, cell: (l) => String(l.received) },
        { title: 'Dropped', num: true, cell: (l) => String(l.dropped) },
        { title: 'Export', cell: (l) => h('span', { class: 'mono' }, l.export) },
        { title: 'Import', cell: (l) => h('span', { class: 'mono' }, l.import) },
        { title: 'Imported agents', num: true, wide: true, cell: (l) => String(l.importedAgents) },
        { title: 'Connected to', wide: true, cell: (l) => (l.connectedTo ? h('span', { class: 'mono' }, l.connectedTo) : '—') },
      ],
      rows: (fed.links || []).slice().sort((a, b) => a.peerSystemId.localeCompare(b.peerSystemId)),
      rowAttrs: (l) => ({ 'data-peer': l.peerSystemId, 'data-state': l.state }),
      empty: 'No federation links.',
    }));
  }

  poll();
  map.addEventListener('connected', kick);
  function kick() { clearTimeout(timer); if (!stopped) poll(); }
  return { stop() { stopped = true; clearTimeout(timer); map.removeEventListener('connected', kick); } };
}

// role is a server's Raft role: leader, voter or nonvoter (or "none" when
// it is not in the configuration).
function role(peer) {
  if (!peer) return 'none';
  if (peer.leader) return 'leader';
  return peer.suffrage === 'voter' ? 'voter' : 'nonvoter';
}

// roleBadge shows a Raft role in words: leader, voter, non-voter, or not
// in the configuration.
function roleBadge(r) {
  const words = { leader: 'leader', voter: 'voter', nonvoter: 'non-voter', none: 'not in Raft' };
  return badge(words[r], { leader: 'ok', voter: 'info', nonvoter: 'warn' }[r] || 'muted');
}

function stat(r, key) {
  return r.st.ok && r.st.s.raft ? r.st.s.raft[key] || '0' : '—';
}

// lastContact is "now" for the leader (it is the one others hear from),
// raft's duration text for a follower.
function lastContact(s) {
  if (s.raft.state === 'Leader') return 'leader';
  const d = s.raft.last_contact || '';
  const m = /^([\d.]+)(ns|µs|us|ms|s|m)$/.exec(d);
  if (!m) return d || '—';
  const ms = Number(m[1]) * { ns: 1e-6, 'µs': 1e-3, us: 1e-3, ms: 1, s: 1e3, m: 6e4 }[m[2]];
  return ms < 1000 ? `${Math.round(ms)} ms ago` : `${(ms / 1000).toFixed(1)} s ago`;
}

// rtt renders a link's round trip (microseconds; 0 before the first
// measurement).
function rtt(us) {
  if (!us) return '—';
  return us < 1000 ? `${us} µs` : `${(us / 1000).toFixed(1)} ms`;
}
