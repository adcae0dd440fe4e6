package node

import (
	"errors"
	"testing"
	"time"
)

func TestRemovedCheck_Decision(t *testing.T) {
	const silence = 600 * time.Millisecond
	cases := []struct {
		name        string
		lastContact string
		ids         []string
		err         error
		ask, out    bool
	}{
		{name: "heard the leader lately", lastContact: "150ms", ids: []string{"b", "c"}, ask: false, out: true},
		{name: "never heard a leader: starting", lastContact: "never", ids: []string{"b", "c"}, ask: false, out: true},
		{name: "leader itself", lastContact: "0", ids: []string{"b", "c"}, ask: false, out: true},
		{name: "garbage stat", lastContact: "soon", ask: false},
		{name: "silent, left out", lastContact: "3.2s", ids: []string{"b", "c"}, ask: true, out: true},
		{name: "silent, still in", lastContact: "3.2s", ids: []string{"a", "b", "c"}, ask: true, out: false},
		{name: "silent, no answer", lastContact: "3.2s", err: errors.New("no live peer"), ask: true, out: false},
		{name: "silent, empty answer", lastContact: "3.2s", ids: nil, ask: true, out: false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := silentLongEnough(tc.lastContact, silence); got != tc.ask {
				t.Fatalf("silentLongEnough(%q) = %v, want %v", tc.lastContact, got, tc.ask)
			}
			if !tc.ask {
				return
			}
			if got := leftOut("a", tc.ids, tc.err); got != tc.out {
				t.Fatalf("leftOut(a, %v, %v) = %v, want %v", tc.ids, tc.err, got, tc.out)
			}
		})
	}
}
