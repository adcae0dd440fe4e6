// Debates page: start a debate (x-concord/runs/start: task, agents,
// policy), the runs with their status (x-concord/runs/list, refreshed on
// run events), and cancel a running one (x-concord/runs/cancel).
import { h, replace, table, statusBadge, time, plural } from './dom.js';
import { MapError } from './map.js';

export function debatesPage(main, { map, store }) {
  const form = startForm(map, store);
  const runsBox = h('div', { id: 'runs' });
  const note = h('p', { class: 'msg', role: 'status', 'aria-live': 'polite', id: 'runs-note' });
  main.append(
    h('h2', null, 'Debates'),
    h('div', { class: 'grid2' },
      h('section', { class: 'panel', 'aria-labelledby': 'runs-h' },
        h('h3', { id: 'runs-h' }, 'Runs'), runsBox, note),
      form.el),
  );

  function render() {
    replace(runsBox, table({
      caption: `${plural(store.runs.length, 'run')}, newest first`,
      label: 'Runs',
      columns: [
        { title: 'Run', rowHeader: true, cell: (r) => h('a', { href: `#/debates/${encodeURIComponent(r.runId)}`, class: 'mono' }, r.requestId || r.runId) },
        { title: 'Status', cell: (r) => statusBadge(r.status) },
        { title: 'Phase', cell: (r) => (r.phase ? `${r.phase.replace('_', ' ')} · round ${r.round}` : '—') },
        { title: 'Agents', cell: (r) => (r.participants || []).join(', ') },
        { title: 'Started', cell: (r) => time(r.startedAt) },
        { title: 'Actions', cell: (r) => (r.status === 'running'
          ? h('button', { type: 'button', class: 'danger', id: `cancel-${r.runId}`, 'aria-label': `Cancel run ${r.requestId || r.runId}`, onclick: () => cancel(r) }, 'Cancel')
          : '—') },
      ],
      rows: store.runs,
      rowAttrs: (r) => ({ 'data-run': r.runId, 'data-status': r.status }),
      empty: 'No runs yet. Start one with the form.',
    }));
    if (store.errors.runs) note.textContent = `Cannot list runs: ${store.errors.runs}`;
  }

  async function cancel(r) {
    try {
      await map.request('x-concord/runs/cancel', { runId: r.runId, reason: 'cancelled from the console' });
      note.textContent = `Run ${r.requestId || r.runId} cancelled.`;
    } catch (err) {
      note.textContent = `Cancel failed: ${err.message}`;
    }
    store.refreshRuns();
  }

  const onAgents = () => form.agents();
  store.addEventListener('runs', render);
  store.addEventListener('agents', onAgents);
  render();
  form.agents();
  store.refreshRuns();
  store.refreshAgents();
  return {
    stop() {
      store.removeEventListener('runs', render);
      store.removeEventListener('agents', onAgents);
    },
  };
}

// startForm builds the start form. Its agent checkboxes follow the
// directory; the request it sends is argue's start request (requestId,
// task, participants, roundPolicy, consensusPolicy, waitingPolicy,
// reportPolicy).
function startForm(map, store) {
  const task = h('textarea', { id: 'start-task', name: 'task', required: true, rows: 3 });
  const agentsBox = h('div', { class: 'checks', id: 'start-agents' });
  const minRounds = h('input', { type: 'number', id: 'start-min', min: 1, max: 20, value: 1, required: true });
  const maxRounds = h('input', { type: 'number', id: 'start-max', min: 1, max: 20, value: 2, required: true });
  const timeout = h('input', { type: 'number', id: 'start-timeout', min: 1, max: 3600, value: 60, required: true });
  const threshold = h('input', { type: 'number', id: 'start-threshold', min: 0, max: 1, step: 0.05, value: 1, required: true,
    'aria-describedby': 'start-threshold-help' });
  const composer = h('select', { id: 'start-composer' },
    h('option', { value: 'builtin' }, 'built-in summary'),
    h('option', { value: 'representative' }, 'written by the representative'));
  const msg = h('p', { class: 'msg', role: 'status', 'aria-live': 'polite', id: 'start-msg' });
  const submit = h('button', { type: 'submit', id: 'start-submit' }, 'Start debate');
  const el = h('section', { class: 'panel', 'aria-labelledby': 'start-h' },
    h('h3', { id: 'start-h' }, 'Start a debate'),
    h('form', { id: 'start-form', novalidate: true, onsubmit: onSubmit },
      h('div', null, h('label', { for: 'start-task' }, 'Task'), task),
      h('fieldset', null, h('legend', null, 'Agents (at least two)'), agentsBox),
      h('div', { class: 'row' },
        h('div', null, h('label', { for: 'start-min' }, 'Min rounds'), minRounds),
        h('div', null, h('label', { for: 'start-max' }, 'Max rounds'), maxRounds),
        h('div', null, h('label', { for: 'start-timeout' }, 'Per-task timeout (s)'), timeout)),
      h('div', { class: 'row' },
        h('div', null, h('label', { for: 'start-threshold' }, 'Consensus threshold'), threshold,
          h('p', { class: 'help muted', id: 'start-threshold-help' }, 'Share of votes that must accept a claim (1 = all).')),
        h('div', null, h('label', { for: 'start-composer' }, 'Report'), composer)),
      submit, msg));

  let shownIds = null;
  function agents() {
    const ids = store.agents.map((a) => a.id);
    // Rebuild only when the directory changed: a checkbox must not be
    // replaced under the reader's pointer by an unrelated refresh.
    if (shownIds === ids.join('\n')) return;
    shownIds = ids.join('\n');
    const checked = new Set([...agentsBox.querySelectorAll('input:checked')].map((i) => i.value));
    replace(agentsBox, ids.length
      ? ids.map((id) => h('label', null, h('input', { type: 'checkbox', name: 'agent', value: id, id: `start-agent-${id}`, checked: checked.has(id) }), id))
      : h('span', { class: 'empty' }, 'No agents are registered.'));
  }

  async function onSubmit(ev) {
    ev.preventDefault();
    const chosen = [...agentsBox.querySelectorAll('input:checked')].map((i) => i.value);
    const problems = [];
    if (!task.value.trim()) problems.push('the task is empty');
    if (chosen.length < 2) problems.push('choose at least two agents');
    if (problems.length) { msg.className = 'msg error'; msg.textContent = `Cannot start: ${problems.join('; ')}.`; return; }
    const ms = Number(timeout.value) * 1000;
    const request = {
      requestId: `console-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 6)}`,
      task: task.value.trim(),
      participants: chosen.map((id) => ({ id })),
      roundPolicy: { minRounds: Number(minRounds.value), maxRounds: Number(maxRounds.value) },
      consensusPolicy: { threshold: Number(threshold.value) },
      waitingPolicy: { perTaskTimeoutMs: ms, perRoundTimeoutMs: 2 * ms },
      reportPolicy: composer.value === 'representative' ? { composer: 'representative' } : { composer: 'builtin' },
    };
    submit.disabled = true;
    msg.className = 'msg';
    msg.textContent = 'Starting…';
    try {
      const res = await map.request('x-concord/runs/start', { request });
      msg.textContent = `Started ${res.requestId}.`;
      store.refreshRuns();
      location.hash = `#/debates/${encodeURIComponent(res.runId)}`;
    } catch (err) {
      msg.className = 'msg error';
      msg.textContent = `Cannot start: ${describe(err)}`;
    } finally {
      submit.disabled = false;
    }
  }

  return { el, agents };
}

// describe turns a MAP error into a sentence, listing a start request's
// field errors when the node sent them.
function describe(err) {
  if (err instanceof MapError && err.data && err.data.details) {
    const d = err.data.details;
    if (Array.isArray(d.errors)) return d.errors.map((e) => `${e.path}: ${e.message}`).join('; ');
    if (Array.isArray(d.agents)) return `unknown agents: ${d.agents.join(', ')}`;
  }
  return err.message;
}
