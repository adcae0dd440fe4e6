package node

import (
	"errors"
	"strings"
	"testing"

	"github.com/concordmap/concord/node/membership"
)

func TestRaftVotersConflict(t *testing.T) {
	member := func(id string, voters int, bootstrapped bool, status membership.Status) membership.Member {
		return membership.Member{ID: id, NodeMeta: membership.NodeMeta{RaftVoters: voters}, Bootstrapped: bootstrapped, Status: status}
	}
	alive := membership.StatusAlive
	system := []membership.Member{member("n1", 3, true, alive), member("n2", 3, true, alive), member("n3", 3, true, alive)}
	with := func(ms ...membership.Member) []membership.Member {
		return append(append([]membership.Member{}, system...), ms...)
	}
	cases := []struct {
		name    string
		self    string
		want    int
		members []membership.Member
		peer    string // the peer named in the error; "" for none
	}{
		{name: "all agree", self: "n4", want: 3, members: with(member("n4", 3, false, alive))},
		{name: "newcomer with another value beside a correct newcomer: the correct one runs", self: "n4", want: 3,
			members: with(member("n4", 3, false, alive), member("n5", 5, false, alive))},
		{name: "the wrong newcomer stops", self: "n5", want: 5,
			members: with(member("n4", 3, false, alive), member("n5", 5, false, alive)), peer: "n1"},
		{name: "established server restarting beside a wrong newcomer runs", self: "n1", want: 3,
			members: with(member("n5", 5, false, alive))},
		{name: "established server restarted with another value stops", self: "n1", want: 5,
			members: []membership.Member{member("n1", 5, true, alive), member("n2", 3, true, alive)}, peer: "n2"},
		{name: "before the system exists any difference stops", self: "n1", want: 3,
			members: []membership.Member{member("n1", 3, false, alive), member("n2", 5, false, alive)}, peer: "n2"},
		{name: "a dead or left peer is not checked", self: "n4", want: 3,
			members: with(member("n4", 3, false, alive), member("n6", 5, true, membership.StatusDead), member("n7", 5, true, membership.StatusLeft))},
		{name: "an older peer advertising no value is not checked", self: "n4", want: 3,
			members: with(member("n4", 3, false, alive), member("n0", 0, true, alive))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := raftVotersConflict(tc.self, tc.want, tc.members)
			if tc.peer == "" {
				if err != nil {
					t.Fatalf("want no conflict, got %v", err)
				}
				return
			}
			if !errors.Is(err, ErrRaftVotersMismatch) || !strings.Contains(err.Error(), " on "+tc.peer+":") {
				t.Fatalf("want a mismatch naming %s, got %v", tc.peer, err)
			}
		})
	}
}
