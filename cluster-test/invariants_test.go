package clustertest

import (
	"strings"
	"testing"

	"github.com/concordmap/concord/node/registry"
)

func TestLeaderObserver_Check(t *testing.T) {
	tests := []struct {
		name    string
		samples [][2]any // node, term (0 = not leading)
		wantErr string
	}{
		{"no leader seen", nil, "saw no leader"},
		{"one sample is not enough", [][2]any{{"a", uint64(3)}}, "saw no leader"},
		{"one leader per term", [][2]any{{"a", uint64(3)}, {"a", uint64(3)}, {"b", uint64(4)}, {"b", uint64(4)}}, ""},
		{"same term twice", [][2]any{{"a", uint64(3)}, {"a", uint64(3)}, {"b", uint64(3)}, {"b", uint64(3)}}, "term 3: [a b]"},
		{"straddling sample ignored", [][2]any{{"a", uint64(3)}, {"a", uint64(3)}, {"b", uint64(3)}, {"b", uint64(0)}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &leaderObserver{leaders: map[uint64][]string{}, last: map[string]uint64{}}
			for _, s := range tt.samples {
				o.record(s[0].(string), s[1].(uint64))
			}
			err := o.check()
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("check() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

// fakeReader is a registry.Reader over a fixed agent set and event log.
type fakeReader struct {
	registry.Reader
	agents map[string]bool
	events []registry.Event
}

func (f *fakeReader) Agent(id string) (registry.Agent, bool) {
	return registry.Agent{ID: id}, f.agents[id]
}
func (f *fakeReader) Window() (uint64, uint64) { return 1, uint64(len(f.events)) }
func (f *fakeReader) EventsAfter(pos uint64, limit int) []registry.Event {
	if pos >= uint64(len(f.events)) {
		return nil
	}
	return f.events[pos:min(len(f.events), int(pos)+limit)]
}

func TestLedger_Check(t *testing.T) {
	ev := func(typ, id string) registry.Event { return registry.Event{Type: typ, AgentIDs: []string{id}} }
	reg, unreg := "agent_registered", "agent_unregistered"
	tests := []struct {
		name    string
		ops     []LedgerOp
		agents  map[string]bool
		events  []registry.Event
		wantErr string
	}{
		{"acked and present", []LedgerOp{{OpRegister, "a", Acked}}, map[string]bool{"a": true}, []registry.Event{ev(reg, "a")}, ""},
		{"acked but never applied", []LedgerOp{{OpRegister, "a", Acked}}, nil, nil, "no register event"},
		{"applied twice", []LedgerOp{{OpRegister, "a", Acked}}, map[string]bool{"a": true}, []registry.Event{ev(reg, "a"), ev(unreg, "a"), ev(reg, "a")}, "2 register events"},
		{"unknown may apply", []LedgerOp{{OpRegister, "a", Acked}, {OpUnregister, "a", Unknown}, {OpRegister, "a", Unknown}},
			map[string]bool{"a": true}, []registry.Event{ev(reg, "a"), ev(unreg, "a"), ev(reg, "a")}, ""},
		{"acked unregister lost", []LedgerOp{{OpRegister, "a", Acked}, {OpUnregister, "a", Acked}}, map[string]bool{"a": true}, []registry.Event{ev(reg, "a")}, "unregister events"},
		{"state disagrees with log", []LedgerOp{{OpRegister, "a", Acked}}, nil, []registry.Event{ev(reg, "a")}, "present=false"},
		{"refused writes count nothing", []LedgerOp{{OpRegister, "a", Refused}}, nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k := range tt.events {
				tt.events[k].Position = uint64(k + 1)
			}
			l := &Ledger{ops: tt.ops}
			err := l.Check(&fakeReader{agents: tt.agents, events: tt.events})
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Check() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
