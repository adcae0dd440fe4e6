// RunModel rebuilds a debate's progress from its engine events (spec §19):
// rounds with their tasks and answers, the claim catalog as it grows and
// merges, stances and votes per claim, eliminations and the closing steps.
// Events are kept by their per-run seq, so the same event arriving twice
// (a replay after a failover) counts once, and the model is rebuilt from
// the events in order.

export class RunModel {
  constructor(runId) {
    this.runId = runId;
    this.events = []; // by seq
  }

  // add records an event {seq, type, at, payload}; it returns false for a
  // duplicate.
  add(ev) {
    if (this.events[ev.seq]) return false;
    this.events[ev.seq] = ev;
    return true;
  }

  // gap reports whether an event is missing before the newest one.
  gap() {
    for (let i = 0; i < this.events.length; i++) if (!this.events[i]) return true;
    return false;
  }

  // derive replays the contiguous events into a view.
  derive() {
    const v = { rounds: [], claims: new Map(), notes: [], eliminated: new Map(), drafted: null, finalized: null, failed: null };
    const roundOf = (phase, round) => {
      let r = v.rounds.find((x) => x.phase === phase && x.round === round);
      if (!r) {
        r = { phase, round, participants: [], responses: new Map(), eliminated: new Map(), completed: null };
        v.rounds.push(r);
      }
      return r;
    };
    for (const ev of this.events) {
      if (!ev) break;
      const p = ev.payload || {};
      switch (ev.type) {
        case 'RoundDispatched':
          roundOf(p.phase, p.round).participants = p.participants || [];
          break;
        case 'ParticipantResponded': {
          const r = roundOf(p.phase, p.round);
          r.responses.set(p.participantId, p);
          (p.extractedClaimsDetail || []).forEach((c, i) => {
            const id = `${p.participantId}:${p.round}:${i}`;
            if (!v.claims.has(id)) {
              v.claims.set(id, { id, title: c.title, statement: c.statement, proposedBy: [p.participantId], round: p.round,
                status: 'active', mergedInto: '', stances: [], votes: new Map() });
            }
          });
          for (const j of p.judgementsDetail || []) {
            const c = v.claims.get(j.claimId);
            if (c) c.stances.push({ participantId: p.participantId, round: p.round, stance: j.stance });
          }
          for (const cv of p.claimVotesDetail || []) {
            const c = v.claims.get(cv.claimId);
            if (c) c.votes.set(p.participantId, cv.vote);
          }
          break;
        }
        case 'ParticipantEliminated':
          roundOf(p.phase, p.round).eliminated.set(p.participantId, p);
          v.eliminated.set(p.participantId, p);
          v.notes.push({ at: ev.at, text: `${p.participantId} eliminated in round ${p.round} (${p.reason}${p.error ? ': ' + p.error : ''})` });
          break;
        case 'ClaimsMerged': {
          const c = v.claims.get(p.sourceClaimId);
          if (c) { c.status = 'merged'; c.mergedInto = p.mergedInto; }
          break;
        }
        case 'RoundCompleted': {
          const r = roundOf(p.phase, p.round);
          r.completed = p;
          if (v.claims.size === 0 && p.newClaims > 0) {
            // No output proposed a claim: the engine seeded one per answer.
            for (const pid of r.responses.keys()) {
              const id = `seed:${pid}:${p.round}`;
              v.claims.set(id, { id, title: `Seed from ${pid}`, statement: r.responses.get(pid).summary, proposedBy: [pid],
                round: p.round, status: 'active', mergedInto: '', stances: [], votes: new Map() });
            }
          }
          break;
        }
        case 'EarlyStopTriggered': v.notes.push({ at: ev.at, text: `Early stop after round ${p.round}: ${p.reason}` }); break;
        case 'GlobalDeadlineHit': v.notes.push({ at: ev.at, text: `Global deadline hit in round ${p.round}` }); break;
        case 'ConsensusDrafted':
          v.drafted = p;
          v.notes.push({ at: ev.at, text: `Consensus drafted: ${p.resolvedCount} of ${p.claimCount} claims resolved` });
          break;
        case 'SessionInterrupted': v.notes.push({ at: ev.at, text: `Interrupted: ${p.reason}` }); break;
        case 'ReportDispatched': v.notes.push({ at: ev.at, text: `Report requested from ${p.reporterId} (${p.composer})` }); break;
        case 'ReportCompleted': v.notes.push({ at: ev.at, text: `Report written by ${p.reporterId} (${p.mode}${p.reason ? ', ' + p.reason : ''})` }); break;
        case 'ActionDispatched': v.notes.push({ at: ev.at, text: `Action requested from ${p.actorId}` }); break;
        case 'ActionCompleted': v.notes.push({ at: ev.at, text: `Action done by ${p.actorId}: ${p.summary}` }); break;
        case 'ActionFailed': v.notes.push({ at: ev.at, text: `Action by ${p.actorId} failed: ${p.reason}` }); break;
        case 'Finalized':
          v.finalized = p;
          v.notes.push({ at: ev.at, text: `Finalized: ${p.status}, representative ${p.representative || 'none'}` });
          break;
        case 'Failed':
          v.failed = p;
          v.notes.push({ at: ev.at, text: `Failed: ${p.code}: ${p.message}` });
          break;
        default:
      }
    }
    return v;
  }
}

// fromEngine converts get's engine envelope (index = seq) into an event.
export function fromEngine(raw, seq) {
  return { seq, type: raw.type, at: raw.at, payload: raw.payload };
}

// fromMap converts a MAP run event (type x-concord.run.<T>) into an event,
// or null for anything else.
export function fromMap(ev) {
  const prefix = 'x-concord.run.';
  if (!ev.type || !ev.type.startsWith(prefix) || !ev.data || typeof ev.data.seq !== 'number') return null;
  return { runId: ev.data.runId, seq: ev.data.seq, type: ev.type.slice(prefix.length), at: ev.data.at, payload: ev.data.payload };
}
