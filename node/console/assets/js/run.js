// Run page: one debate, live. It loads the run with its events
// (x-concord/runs/get include events, result), then follows the run's MAP
// events; a gap in the event sequence (events missed while reconnecting)
// loads the run again. A finished run shows its result first, rendered
// like argue's viewer, with links to the node's result files.
import { h, card, replace, table, statusBadge, badge, time, throttle, plural } from './dom.js';
import { RunModel, fromEngine, fromMap } from './runmodel.js';
import { renderResult } from './result.js';

export function runPage(main, { map, nodes, store }, runId) {
  const model = new RunModel(runId);
  let summary = null;
  let result = null;
  let stopped = false;
  const opened = new Map(); // round key → open, as the reader left it
  const head = h('div', { id: 'run-head' });
  const resultBox = h('div', { id: 'run-result' });
  const live = h('div', { id: 'run-live' });
  const note = h('p', { class: 'msg', role: 'status', 'aria-live': 'polite', id: 'run-note' });
  main.append(
    h('p', null, h('a', { href: '#/debates' }, '← All debates')),
    h('h2', { id: 'run-title' }, `Debate ${runId}`),
    head, note, resultBox, live);

  const load = throttle(async () => {
    try {
      const res = await map.request('x-concord/runs/get', { runId, include: ['events', 'result'] });
      if (stopped) return;
      const run = res.run;
      summary = run;
      result = run.result || null;
      (run.events || []).forEach((raw, i) => model.add(fromEngine(raw, i)));
      note.textContent = '';
      render();
    } catch (err) {
      if (!stopped) note.textContent = `Cannot load the run: ${err.message}`;
    }
  }, 500);

  const render = throttle(() => {
    if (stopped || !summary) return;
    const v = model.derive();
    const running = summary.status === 'running';
    document.getElementById('run-title').textContent = `Debate ${summary.requestId || runId}`;
    renderHead(v);
    if (result) replace(resultBox, renderResult(result));
    else replace(resultBox);
    replace(live,
      section('rounds-h', 'Rounds', v.rounds.length
        ? v.rounds.map((r, i) => renderRound(r, running, i === v.rounds.length - 1, opened))
        : h('p', { class: 'empty' }, 'Waiting for the first round.')),
      section('claims-h', 'Claims', renderClaims(v, running)),
      section('progress-h', 'Progress', v.notes.length
        ? h('ol', { class: 'plain', id: 'progress' }, v.notes.map((n) => h('li', null, time(n.at), ' ', n.text)))
        : h('p', { class: 'empty' }, 'Nothing has concluded yet.')));
  }, 150);

  function renderHead(v) {
    const s = summary;
    const over = s.status !== 'running';
    const files = ['result.json', 'events.jsonl', 'summary.md'].map((f) => {
      const ready = f === 'events.jsonl' || (f === 'result.json' ? !!result : over);
      const why = over ? `none: the run ${s.status === 'finished' ? 'has no result' : 'was ' + s.status}` : 'when the run is over';
      return h('li', null, ready
        ? h('a', { href: nodes.url(`/v1/runs/${encodeURIComponent(runId)}/${f}`), download: `${s.requestId || runId}-${f}`, id: `file-${f.replace('.', '-')}` }, f)
        : h('span', { class: 'muted' }, `${f} (${why})`));
    });
    replace(head, h('section', { class: 'panel', 'aria-label': 'Run status' },
      h('div', { class: 'toolbar' },
        h('dl', { class: 'cards compact' },
          card('Status', statusBadge(s.status), { id: 'run-status', 'data-status': s.status }),
          card('Phase', s.phase ? `${s.phase.replace('_', ' ')} · round ${s.round}` : '—', { id: 'run-phase' }),
          card('Agents', `${(s.activeParticipants || []).length} of ${(s.participants || []).length} active`),
          card('Started', time(s.startedAt)),
          card('Took', s.finishedAt ? duration(s.finishedAt - s.startedAt) : 'running')),
        s.status === 'running' ? h('button', { type: 'button', class: 'danger', id: 'run-cancel', onclick: cancel }, 'Cancel run') : null),
      s.error ? h('p', { class: 'msg error' }, `${s.error.code}: ${s.error.message}`) : null,
      h('div', { class: 'files' }, h('h3', { id: 'files-h' }, 'Files'),
        h('ul', { class: 'downloads', 'aria-labelledby': 'files-h' }, files)),
      v.drafted ? h('p', null, `Consensus drafted: ${v.drafted.resolvedCount} of ${v.drafted.claimCount} claims resolved.`) : null));
  }

  async function cancel() {
    try {
      const res = await map.request('x-concord/runs/cancel', { runId, reason: 'cancelled from the console' });
      summary = res.run;
      note.textContent = 'Run cancelled.';
      render();
    } catch (err) {
      note.textContent = `Cancel failed: ${err.message}`;
    }
  }

  function onRunEvent(e) {
    const ev = fromMap(e.detail);
    if (!ev || ev.runId !== runId) return;
    model.add(ev);
    // The summary (status, phase) and the result come from get: reload
    // when the round or the run's state moves, and on a gap.
    if (model.gap() || /^(RoundDispatched|Finalized|Failed|ConsensusDrafted)$/.test(ev.type) || !summary) load();
    render();
  }

  store.addEventListener('runEvent', onRunEvent);
  map.addEventListener('connected', load);
  load();
  return {
    stop() {
      stopped = true;
      store.removeEventListener('runEvent', onRunEvent);
      map.removeEventListener('connected', load);
    },
  };
}

function section(id, title, body) {
  return h('section', { class: 'panel', 'aria-labelledby': id }, h('h3', { id }, title), body);
}

// renderRound shows one round as a disclosure: open while it runs (and,
// for a running debate, the latest round), closed once the debate is over;
// a reader's own open/close choice is kept across re-renders in opened.
function renderRound(r, running, latest, opened) {
  const key = `${r.phase}:${r.round}`;
  const c = r.completed;
  const state = c ? `${c.completed} answered, ${c.timedOut} timed out, ${c.failed} failed, ${plural(c.newClaims, 'new claim')}, ${plural(c.mergeCount, 'merge')}`
    : `${running ? 'in progress' : 'stopped'}: ${r.responses.size} of ${r.participants.length} answered`;
  const progress = c ? badge('completed', 'ok') : running ? badge('in progress', 'info') : badge('stopped', 'warn');
  const open = opened.has(key) ? opened.get(key) : running && (latest || !c);
  const el = h('details', { class: 'round', open, 'data-round': key, 'data-answered': r.responses.size, 'data-done': c ? 'true' : 'false' },
    h('summary', null, h('span', { class: 'round-title' }, `Round ${r.round} · ${r.phase.replace('_', ' ')}`), ' ',
      progress, ' ', h('span', { class: 'muted' }, state)),
    table({
      label: `Round ${r.round} answers`,
      columns: [
        { title: 'Agent', rowHeader: true, cell: (pid) => h('span', { class: 'mono' }, pid) },
        { title: 'Task', cell: (pid) => statusBadge(taskState(r, pid, running)) },
        { title: 'Summary', cell: (pid) => (r.responses.get(pid) || {}).summary || '—' },
        { title: 'New claims', cell: (pid) => list(((r.responses.get(pid) || {}).extractedClaimsDetail || []).map((x) => x.title)) },
        { title: 'Judgements', cell: (pid) => chips(((r.responses.get(pid) || {}).judgementsDetail || []).map((j) => [j.claimId, j.stance])) },
        { title: 'Votes', cell: (pid) => chips(((r.responses.get(pid) || {}).claimVotesDetail || []).map((x) => [x.claimId, x.vote])) },
      ],
      rows: r.participants.length ? r.participants : [...r.responses.keys()],
      rowAttrs: (pid) => ({ 'data-agent': pid, 'data-task': taskState(r, pid, running) }),
    }));
  // toggle also fires for the initial state; only a change is the reader's.
  el.addEventListener('toggle', () => { if (el.open !== open) opened.set(key, el.open); });
  return el;
}

// taskState is a participant's round task: answered, eliminated, waiting
// (the round runs) or abandoned (the run ended without the answer).
function taskState(r, pid, running) {
  if (r.responses.has(pid)) return 'answered';
  if (r.eliminated.has(pid)) return 'eliminated';
  return running || r.completed ? 'waiting' : 'abandoned';
}

// chips renders (claim, word) pairs compactly: "alice:0:1 agree".
function chips(pairs) {
  if (!pairs.length) return '—';
  return h('ul', { class: 'chips' }, pairs.map(([id, word]) => h('li', null, h('span', { class: 'mono' }, id), ' ', statusBadge(word))));
}

function renderClaims(v, running) {
  const claims = [...v.claims.values()];
  if (!claims.length) return h('p', { class: 'empty' }, running ? 'No claims yet.' : 'No claims.');
  const count = (c, s) => c.stances.filter((x) => x.stance === s).length;
  return table({
    caption: `${claims.length} claims, ${claims.filter((c) => c.status === 'merged').length} merged`,
    label: 'Claims so far',
    columns: [
      { title: 'Claim', rowHeader: true, cell: (c) => h('span', { class: 'mono' }, c.id) },
      { title: 'Title', cell: (c) => c.title },
      { title: 'Proposed by', cell: (c) => c.proposedBy.join(', ') },
      { title: 'Status', cell: (c) => (c.status === 'merged' ? [statusBadge('merged'), ' into ', h('span', { class: 'mono' }, c.mergedInto)] : statusBadge('active')) },
      { title: 'Agree', num: true, cell: (c) => count(c, 'agree') },
      { title: 'Disagree', num: true, cell: (c) => count(c, 'disagree') },
      { title: 'Revise', num: true, cell: (c) => count(c, 'revise') },
      { title: 'Votes', cell: (c) => chips([...c.votes]) },
    ],
    rows: claims,
    rowAttrs: (c) => ({ 'data-claim': c.id, 'data-status': c.status }),
  });
}

function list(items) {
  if (!items.length) return '—';
  return h('ul', { class: 'plain' }, items.map((x) => h('li', null, x)));
}

// duration renders milliseconds as "850 ms", "12.3 s" or "4 min 5 s".
function duration(ms) {
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}
