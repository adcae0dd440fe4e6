package membership

import (
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// junkMeta is a raw memberlist delegate advertising meta a Concord node
// cannot decode: a peer running other software, or a corrupted one.
type junkMeta struct{ meta []byte }

func (j junkMeta) NodeMeta(int) []byte           { return j.meta }
func (junkMeta) NotifyMsg([]byte)                {}
func (junkMeta) GetBroadcasts(int, int) [][]byte { return nil }
func (junkMeta) LocalState(bool) []byte          { return nil }
func (junkMeta) MergeRemoteState([]byte, bool)   {}

func TestMembership_IgnoresPeerWithGarbageMeta(t *testing.T) {
	a := mustStart(t, testConfig(t, "a"))
	seed := []string{a.LocalMember().GossipAddr}

	for i, meta := range [][]byte{{0xde, 0xad, 0xbe, 0xef}, {metaFormatV1, 0xff, 0xff}, nil} {
		mc := memberlist.DefaultLocalConfig()
		mc.Name = "junk" + string(rune('0'+i))
		mc.BindAddr, mc.BindPort, mc.AdvertisePort = "127.0.0.1", 0, 0
		mc.SecretKey = testKey
		mc.Delegate = junkMeta{meta: meta}
		mc.Logger = newMemberlistLogger(testLogger(t, mc.Name, slog.LevelWarn), new(atomic.Bool))
		mc.LogOutput = nil
		TestTimings().apply(mc)
		junk, err := memberlist.Create(mc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { junk.Shutdown() })
		// The junk node's join may "succeed" from its side; a must not care.
		_, _ = junk.Join(seed)
	}

	cfgB := testConfig(t, "b")
	cfgB.JoinAddrs = seed
	b := mustStart(t, cfgB)
	consistently(t, scaled(time.Second), func() error {
		for _, m := range []*Membership{a, b} {
			for _, mem := range m.Members() {
				if strings.HasPrefix(mem.ID, "junk") {
					return fmt.Errorf("%s lists junk peer %+v", m.cfg.NodeID, mem)
				}
			}
		}
		return nil
	})
	for _, m := range []*Membership{a, b} {
		eventually(t, 5*time.Second, func() error { return seesAlive(m, []string{"a", "b"}) })
	}
}
