package runs

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/registry"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// openAgentSession opens session s-<id> for agent id in the env's
// registry (attach epoch 1) and, resumed, moves it on to epoch 2.
func (e *env) openAgentSession(id string, resumed bool) {
	e.t.Helper()
	open := &concordv1.SessionOpenRequest{Meta: &concordv1.CommandMeta{TimestampMs: t0, NodeId: "n1"}, Session: &concordv1.SessionRecord{
		Id: "s-" + id, ParticipantId: id, ParticipantType: "agent", HomeNode: "n1", ResumeTokenHash: []byte("h")}}
	steps := []*concordv1.SessionOpenRequest{open}
	if resumed {
		steps = append(steps, &concordv1.SessionOpenRequest{Meta: &concordv1.CommandMeta{TimestampMs: t0 + 1, NodeId: "n2"}, Resume: true,
			ResumeFromEpoch: 1, Session: &concordv1.SessionRecord{Id: "s-" + id, HomeNode: "n2", ResumeTokenHash: []byte("h")}})
	}
	for _, m := range steps {
		if _, _, err := e.store.Apply(context.Background(), concordv1.CommandType_COMMAND_TYPE_SESSION_OPEN, m); err != nil {
			e.t.Fatal(err)
		}
	}
}

// TestService_ReplyQuotesSessionEpoch: once every server enforces
// FSMLevelModuleSessionWrites an agent's reply quotes the session and
// attach epoch of the connection that sent it; a reply from a connection
// whose session has moved on since (resumed elsewhere) is refused with the
// registry's ErrSessionMoved (MAP: retryable 4000, session_moved) and
// commits nothing. Below that level nothing is quoted (older servers
// would not check it).
func TestService_ReplyQuotesSessionEpoch(t *testing.T) {
	for _, level := range []int{registry.FSMLevelModuleSessionWrites - 1, registry.FSMLevelModuleSessionWrites} {
		t.Run(fmt.Sprintf("level %d", level), func(t *testing.T) {
			e := newEnv(t, func(c *ServiceConfig) { c.FSMLevel = func(context.Context) int { return level } })
			e.props.keep = true
			e.agents.setBehaviour(func(*consensus.Task, int) int { return actSilent })
			e.setLeader(true)
			id := e.mustStart(request3)
			tasks := e.outstandingOf(id)
			e.openAgentSession("p1", false)
			e.openAgentSession("p2", true)

			from := agentSender("p1")
			from.SessionEpoch = 1
			if _, err := e.svc.HandleSend(t.Context(), from, replyParams(tasks["p1"].ID, persona(t, tasks["p1"]))); err != nil {
				t.Fatalf("reply from the session's connection: %v", err)
			}
			stale := agentSender("p2")
			stale.SessionEpoch = 1
			_, err := e.svc.HandleSend(t.Context(), stale, replyParams(tasks["p2"].ID, persona(t, tasks["p2"])))
			enforced := level >= registry.FSMLevelModuleSessionWrites
			if enforced != errors.Is(err, registry.ErrSessionMoved) {
				t.Fatalf("reply from the connection p2's session left: %v (enforced %v)", err, enforced)
			}

			e.props.mu.Lock()
			defer e.props.mu.Unlock()
			var replies []*concordv1.RunInput
			for _, in := range e.props.inputs {
				if in.GetTaskResult() != nil {
					replies = append(replies, in)
				}
			}
			want := 2
			if enforced {
				want = 1 // the refusal is found before proposing
			}
			if len(replies) != want {
				t.Fatalf("%d replies proposed, want %d", len(replies), want)
			}
			for _, in := range replies {
				sid, ep := "", uint64(0)
				if enforced {
					sid, ep = "s-p1", 1
				}
				if in.GetOriginSessionId() != sid || in.GetOriginSessionEpoch() != ep {
					t.Fatalf("reply proposed quoting %q epoch %d, want %q %d", in.GetOriginSessionId(), in.GetOriginSessionEpoch(), sid, ep)
				}
			}
		})
	}
}
