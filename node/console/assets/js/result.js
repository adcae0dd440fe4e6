// renderResult shows a finished run's result the way argue's viewer does:
// status and representative, the report, the claims with their resolution
// and votes, the scoreboard, eliminations and disagreements.
import { h, card, table, statusBadge, badge } from './dom.js';

export function renderResult(res) {
  const rep = res.representative || {};
  const report = res.report || {};
  const byClaim = Object.fromEntries((res.claimResolutions || []).map((r) => [r.claimId, r]));
  const claims = res.finalClaims || [];
  return h('section', { class: 'panel', 'aria-labelledby': 'result-h', id: 'result' },
    h('h3', { id: 'result-h' }, 'Result'),
    res.task && res.task.title ? h('p', null, h('strong', null, 'Task: '), res.task.title) : null,
    h('dl', { class: 'cards' },
      card('Outcome', statusBadge(res.status), { id: 'result-status', 'data-status': res.status }),
      card('Representative', rep.participantId || 'none', { id: 'result-rep' }),
      card('Claims resolved', `${(res.claimResolutions || []).filter((r) => r.status === 'resolved').length} of ${(res.claimResolutions || []).length}`),
      card('Rounds', (res.rounds || []).length)),
    rep.reason ? h('p', { class: 'muted' }, `Chosen because: ${rep.reason} (score ${fmt(rep.score)})`) : null,
    report.finalSummary ? [h('h4', null, 'Summary'), h('div', { class: 'speech', id: 'result-summary' }, prose(report.finalSummary))] : null,
    rep.speech || report.representativeSpeech ? [h('h4', null, 'Representative speech'), h('div', { class: 'speech' }, prose(report.representativeSpeech || rep.speech))] : null,
    h('h4', null, 'Claims'),
    table({
      label: 'Result claims',
      caption: `${claims.length} claims; a claim is resolved when enough votes accept it`,
      columns: [
        { title: 'Claim', rowHeader: true, cell: (c) => h('span', { class: 'mono' }, c.claimId) },
        { title: 'Claim text', cell: (c) => [h('strong', null, c.title), h('br'), h('span', { class: 'muted' }, c.statement)] },
        { title: 'Status', cell: (c) => (c.status === 'merged' ? [statusBadge('merged'), ' into ', h('span', { class: 'mono' }, c.mergedInto)] : statusBadge(c.status)) },
        { title: 'Resolution', cell: (c) => (byClaim[c.claimId] ? statusBadge(byClaim[c.claimId].status) : '—') },
        { title: 'Accept', num: true, cell: (c) => (byClaim[c.claimId] ? byClaim[c.claimId].acceptCount : '—') },
        { title: 'Reject', num: true, cell: (c) => (byClaim[c.claimId] ? byClaim[c.claimId].rejectCount : '—') },
        { title: 'Votes', cell: (c) => votes(byClaim[c.claimId]) },
      ],
      rows: claims,
      rowAttrs: (c) => ({ 'data-claim': c.claimId, 'data-status': c.status, 'data-resolution': byClaim[c.claimId] ? byClaim[c.claimId].status : '' }),
    }),
    h('h4', null, 'Scoreboard'),
    table({
      label: 'Scoreboard',
      columns: [
        { title: 'Agent', rowHeader: true, cell: (s) => [h('span', { class: 'mono' }, s.participantId), s.participantId === rep.participantId ? [' ', badge('representative', 'ok')] : null] },
        { title: 'Total', num: true, cell: (s) => fmt(s.total) },
        { title: 'By round', cell: (s) => (s.byRound || []).map((r) => `r${r.round}: ${fmt(r.score)}`).join(' · ') || '—' },
      ],
      rows: res.scoreboard || [],
      rowAttrs: (s) => ({ 'data-agent': s.participantId }),
    }),
    (res.eliminations || []).length ? [h('h4', null, 'Eliminations'), h('ul', { class: 'plain' },
      res.eliminations.map((e) => h('li', null, `${e.participantId}: round ${e.round}, ${e.reason}`)))] : null,
    (res.disagreements || []).length ? [h('h4', null, 'Disagreements'), h('ul', { class: 'plain' },
      res.disagreements.map((d) => h('li', null, h('span', { class: 'mono' }, d.claimId), ` — ${d.participantId}: ${d.reason}`)))] : null);
}

function votes(r) {
  if (!r || !(r.votes || []).length) return '—';
  return h('ul', { class: 'chips' }, r.votes.map((v) => h('li', null, `${v.participantId} `, statusBadge(v.vote))));
}

// prose renders report text: paragraphs per blank line, **bold** kept as
// bold (argue's reports use it for names), everything else as text.
function prose(text) {
  return String(text).split(/\n{2,}/).map((para) => h('p', null,
    para.split(/\*\*(.+?)\*\*/g).map((part, i) => (i % 2 ? h('strong', null, part) : part))));
}

function fmt(n) {
  return typeof n === 'number' ? n.toFixed(2) : '—';
}
