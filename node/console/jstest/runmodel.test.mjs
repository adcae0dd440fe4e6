// Unit tests of the run view's model: the claim catalog, merges, stances,
// votes and eliminations rebuilt from engine events (run by js_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RunModel, fromMap } from '../assets/js/runmodel.js';

const ev = (seq, type, payload) => ({ seq, type, at: '2026-01-01T00:00:00Z', payload });

test('rebuilds claims, merges, stances and votes from the events, each event once', () => {
  const m = new RunModel('run1');
  const events = [
    ev(0, 'SessionStarted', { participants: ['a', 'b'] }),
    ev(1, 'RoundDispatched', { phase: 'initial', round: 0, participants: ['a', 'b'] }),
    ev(2, 'ParticipantResponded', { phase: 'initial', round: 0, participantId: 'a', summary: 'sa',
      extractedClaimsDetail: [{ title: 'A1' }, { title: 'A2' }], judgementsDetail: [] }),
    ev(3, 'ParticipantResponded', { phase: 'initial', round: 0, participantId: 'b', summary: 'sb',
      extractedClaimsDetail: [{ title: 'B1' }], judgementsDetail: [] }),
    ev(4, 'RoundCompleted', { phase: 'initial', round: 0, completed: 2, newClaims: 3, mergeCount: 0 }),
    ev(5, 'RoundDispatched', { phase: 'debate', round: 1, participants: ['a', 'b'] }),
    ev(6, 'ParticipantResponded', { phase: 'debate', round: 1, participantId: 'a',
      judgementsDetail: [{ claimId: 'b:0:0', stance: 'agree', mergesWith: 'a:0:1' }] }),
    ev(7, 'ClaimsMerged', { phase: 'debate', round: 1, sourceClaimId: 'b:0:0', mergedInto: 'a:0:1' }),
    ev(8, 'ParticipantEliminated', { phase: 'debate', round: 1, participantId: 'b', reason: 'timeout' }),
    ev(9, 'RoundDispatched', { phase: 'final_vote', round: 2, participants: ['a'] }),
    ev(10, 'ParticipantResponded', { phase: 'final_vote', round: 2, participantId: 'a', judgementsDetail: [],
      claimVotesDetail: [{ claimId: 'a:0:0', vote: 'accept' }, { claimId: 'a:0:1', vote: 'reject' }] }),
    ev(11, 'ConsensusDrafted', { claimCount: 2, resolvedCount: 1 }),
    ev(12, 'Finalized', { status: 'partial_consensus', representative: 'a' }),
  ];
  for (const e of events) assert.equal(m.add(e), true);
  assert.equal(m.add(events[3]), false, 'a replayed event is a duplicate');
  assert.equal(m.gap(), false);
  const v = m.derive();
  assert.deepEqual([...v.claims.keys()], ['a:0:0', 'a:0:1', 'b:0:0']);
  assert.equal(v.claims.get('b:0:0').status, 'merged');
  assert.equal(v.claims.get('b:0:0').mergedInto, 'a:0:1');
  assert.deepEqual(v.claims.get('b:0:0').stances.map((s) => [s.participantId, s.stance]), [['a', 'agree']]);
  assert.deepEqual([...v.claims.get('a:0:1').votes], [['a', 'reject']]);
  assert.deepEqual(v.rounds.map((r) => `${r.phase}:${r.round}:${r.responses.size}`), ['initial:0:2', 'debate:1:1', 'final_vote:2:1']);
  assert.equal(v.rounds[1].eliminated.get('b').reason, 'timeout');
  assert.deepEqual(v.drafted, { claimCount: 2, resolvedCount: 1 });
  assert.equal(v.finalized.representative, 'a');
});

test('seeds one claim per answer when a round proposed none, and spots gaps', () => {
  const m = new RunModel('run2');
  m.add(ev(0, 'RoundDispatched', { phase: 'initial', round: 0, participants: ['a', 'b'] }));
  m.add(ev(1, 'ParticipantResponded', { phase: 'initial', round: 0, participantId: 'a', summary: 'sa', judgementsDetail: [] }));
  m.add(ev(2, 'ParticipantResponded', { phase: 'initial', round: 0, participantId: 'b', summary: 'sb', judgementsDetail: [] }));
  m.add(ev(3, 'RoundCompleted', { phase: 'initial', round: 0, newClaims: 2 }));
  assert.deepEqual([...m.derive().claims.keys()], ['seed:a:0', 'seed:b:0']);
  m.add(ev(5, 'RoundDispatched', { phase: 'debate', round: 1, participants: ['a', 'b'] }));
  assert.equal(m.gap(), true, 'event 4 is missing');
  assert.equal(m.derive().rounds.length, 1, 'nothing after a gap is applied');
});

test('reads MAP run events and ignores others', () => {
  assert.deepEqual(fromMap({ type: 'x-concord.run.RoundCompleted', data: { runId: 'r', seq: 3, at: 't', payload: { round: 1 } } }),
    { runId: 'r', seq: 3, type: 'RoundCompleted', at: 't', payload: { round: 1 } });
  assert.equal(fromMap({ type: 'agent_registered', data: { seq: 1 } }), null);
  assert.equal(fromMap({ type: 'x-concord.run.Finalized', data: { runId: 'r' } }), null);
});
