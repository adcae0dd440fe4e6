//go:build unix

package registry

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// BenchmarkApply_AgentUpdateOrigin: BenchmarkApply_AgentUpdate's state
// update (one event id), without and with the origin session and epoch
// mapsvc adds once every server enforces FSMLevelSessionWrites (the hand
// decoder reads them; checkOrigin looks the session up).
func BenchmarkApply_AgentUpdateOrigin(bb *testing.B) {
	for _, origin := range []bool{false, true} {
		bb.Run(fmt.Sprintf("origin=%v", origin), func(bb *testing.B) {
			b := newBenchState(bb)
			agents := b.agents(64)
			b.fillWindow(agents)
			states := [2]string{"busy", "idle"}
			round := b.s.window/len(agents) + 1
			b.run(bb, func(i int) []encoded {
				n := i % len(agents)
				m := &concordv1.AgentUpdateRequest{Meta: b.meta(1), AgentId: agents[n], State: proto.String(states[(round+i/len(agents))%2])}
				if origin {
					m.OriginSessionId, m.OriginSessionEpoch = fmt.Sprintf("session-%04d", n), 1
				}
				return []encoded{b.encode(cAgentUpdate, m)}
			})
		})
	}
}
