package runs

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/consensus"
	"github.com/concordmap/concord/node/router"
	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// fakeRemote is the federation state of system dc1: a link to dc2, which
// exports agent bob.
type fakeRemote struct{}

func (fakeRemote) Link(system string) (*concordv1.FedLink, bool) {
	if system != "dc2" {
		return nil, false
	}
	return &concordv1.FedLink{PeerSystemId: "dc2"}, true
}

func (fakeRemote) RemoteAgent(system, id string) (*concordv1.FedRemoteAgent, bool) {
	if system != "dc2" || id != "bob" {
		return nil, false
	}
	return &concordv1.FedRemoteAgent{Id: id}, true
}

func remoteEnv(t *testing.T) *env {
	return newEnv(t, func(c *ServiceConfig) { c.SystemID, c.Remote = testSystem, fakeRemote{} })
}

// startWith is a start request with these participants.
func startWith(ids ...string) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = `{"id":"` + id + `"}`
	}
	return `{"requestId":"r","task":"t","participants":[` + strings.Join(parts, ",") + `],` +
		`"roundPolicy":{"minRounds":1,"maxRounds":2},"waitingPolicy":{"perTaskTimeoutMs":5000,"perRoundTimeoutMs":60000}}`
}

// TestService_RemoteStartChecks: a participant of another system must be
// in the directory imported from a linked system; this system's own id in
// that form names a local agent. A refusal writes nothing.
func TestService_RemoteStartChecks(t *testing.T) {
	e := remoteEnv(t)
	e.setLeader(true)
	for _, tc := range []struct {
		name   string
		ids    []string
		code   int
		inText string
	}{
		{"unlinked system", []string{"p1", "dc9:agent:x"}, rpc.CodeFederationSystemNotFound, "no link to dc9"},
		{"not imported", []string{"p1", "dc2:agent:nobody"}, rpc.CodeAgentNotFound, "not in the directory imported from dc2"},
		{"own system, unknown", []string{"p1", "dc1:agent:ghost"}, rpc.CodeAgentNotFound, "dc1:agent:ghost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got *rpc.Error
			e.refused(t, tc.name, func() (map[string]any, *rpc.Error) {
				res, err := e.call(MethodStart, `{"request":`+startWith(tc.ids...)+`}`)
				got = err
				return res, err
			}, tc.code, "")
			if !strings.Contains(got.Message, tc.inText) {
				t.Fatalf("message %q lacks %q", got.Message, tc.inText)
			}
		})
	}
	// Without federation state, another system's agent is refused too.
	e2 := newEnv(t)
	e2.setLeader(true)
	e2.refused(t, "no federation", func() (map[string]any, *rpc.Error) {
		return e2.call(MethodStart, `{"request":`+startWith("p1", "dc2:agent:bob")+`}`)
	}, rpc.CodeFederationSystemNotFound, "")
}

// TestService_RemoteParticipant: a run with a participant of dc2 and one
// named in dc1's own federated form sends their tasks to {system, agent},
// accepts the remote answer only from dc2's agent over the link, and
// finishes like a local run.
func TestService_RemoteParticipant(t *testing.T) {
	e := remoteEnv(t)
	e.agents.setBehaviour(func(task *consensus.Task, _ int) int {
		if (task.ParticipantID == "dc2:agent:bob" || task.ParticipantID == "p1") && task.Kind == consensus.TaskRound && task.Round == 0 {
			return actSilent // answered by hand below
		}
		return actAnswer
	})
	e.setLeader(true)
	id := e.mustStart(startWith("p1", "dc1:agent:p2", "dc2:agent:bob"))
	var bob *consensus.Task
	// Wait until only the silent tasks are open: refusals below check
	// that nothing more is written.
	eventually(t, 5*time.Second, func() error {
		open := e.outstandingOf(id)
		bob = open["dc2:agent:bob"]
		if bob == nil || e.agents.attempts(bob.ID) == 0 || len(open) != 2 {
			return errors.New("waiting for bob's first task to be sent and dc1:agent:p2's answer")
		}
		return nil
	})
	out, err := consensus.Persona{}.Answer(bob)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		from   router.Sender
		reason string
	}{
		{"local agent under the remote id", router.Sender{SessionID: "s-f", ParticipantID: "dc2:agent:bob", ParticipantType: "agent", AgentID: "dc2:agent:bob"}, ReasonWrongAgent},
		{"same agent id in another system", agentSender("dc3:agent:bob"), ReasonNotParticipant},
	} {
		e.refused(t, tc.name, func() (map[string]any, *rpc.Error) {
			res, err := e.svc.HandleSend(t.Context(), tc.from, replyParams(bob.ID, out))
			return decodeResult(t, res, err)
		}, rpc.CodePermissionDenied, tc.reason)
	}
	// A remote sender never answers for a local participant, even one
	// whose id it carries.
	p1 := e.outstandingOf(id)["p1"]
	for _, from := range []router.Sender{agentSender("dc2:agent:p1"), {ParticipantID: "p1", ParticipantType: "agent", AgentID: "p1", SourceSystem: "dc2"}} {
		e.refused(t, "remote sender for a local task", func() (map[string]any, *rpc.Error) {
			res, err := e.svc.HandleSend(t.Context(), from, replyParams(p1.ID, json.RawMessage(`{"kind":"error","error":"x"}`)))
			return decodeResult(t, res, err)
		}, rpc.CodePermissionDenied, "")
	}
	p1Out, err := consensus.Persona{}.Answer(p1)
	if err != nil {
		t.Fatal(err)
	}
	if _, rerr := e.reply("p1", p1.ID, p1Out); rerr != nil {
		t.Fatalf("p1 refused: %v", rerr)
	}
	if _, rerr := e.reply("dc2:agent:bob", bob.ID, out); rerr != nil {
		t.Fatalf("dc2's bob over the link refused: %v", rerr)
	}
	e.waitStatus(id, StatusFinished)
	run, _ := e.mod.Get(id, Include{})
	if len(run.Eliminations) != 0 {
		t.Fatalf("eliminations %+v", run.Eliminations)
	}
}

// TestDriver_UndeliverableTaskFailsAtOnce: a task the link refuses for
// the message itself (larger than its envelope limit) is not retried until
// its timer: the driver commits its failure, the participant is eliminated
// with the reason in the run, and the others finish.
func TestDriver_UndeliverableTaskFailsAtOnce(t *testing.T) {
	e := remoteEnv(t)
	e.agents.setBehaviour(func(task *consensus.Task, _ int) int {
		if task.ParticipantID == "dc2:agent:bob" {
			return actTooLarge
		}
		return actAnswer
	})
	e.setLeader(true)
	id := e.mustStart(startWith("p1", "p2", "dc2:agent:bob"))
	e.waitStatus(id, StatusFinished) // no clock advance: no timer fires
	run, _ := e.mod.Get(id, Include{Events: true})
	if len(run.Eliminations) != 1 || run.Eliminations[0].ParticipantID != "dc2:agent:bob" || run.Eliminations[0].Reason != "error" {
		t.Fatalf("eliminations %+v, want dc2:agent:bob for error", run.Eliminations)
	}
	found := false
	for _, ev := range run.Events {
		found = found || strings.Contains(string(ev), "task not deliverable to dc2:agent:bob: message of 2000000 bytes exceeds the federation limit")
	}
	if !found {
		t.Fatal("the delivery error is not in the elimination event")
	}
	if n := e.props.count("task_failed"); n != 1 {
		t.Fatalf("%d task_failed proposals, want 1", n)
	}
}
