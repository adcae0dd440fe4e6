package clustertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/concordmap/concord/node/rpc"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

func policy(kind concordv1.FedPolicyKind, v string) *concordv1.FedPolicy {
	return &concordv1.FedPolicy{Kind: kind, Value: v}
}

var exportAll = policy(concordv1.FedPolicyKind_FED_POLICY_KIND_ALL, "")

// twoSystems starts dc1 and dc2 (3 nodes each) on one fault network and
// links them: dc2 exports everything to dc1, dc1 only agents of role
// "public" to dc2.
func twoSystems(t *testing.T) (dc1, dc2 *Cluster) {
	t.Helper()
	net := NewNetwork(t, nil)
	dc1 = New(t, 3, WithSystem("dc1"), WithSharedNetwork(net), WithInsecure())
	dc2 = New(t, 3, WithSystem("dc2"), WithSharedNetwork(net), WithInsecure())
	Link(t, dc1, dc2, LinkSpec{FromExport: policy(concordv1.FedPolicyKind_FED_POLICY_KIND_ROLE, "public"), ToExport: exportAll})
	Eventually(t, 10*time.Second, func() error { return dc1.LinkUp("dc2") })
	Eventually(t, 10*time.Second, func() error { return dc2.LinkUp("dc1") })
	return dc1, dc2
}

func waitImported(t *testing.T, c *Cluster, peer string, want ...string) {
	t.Helper()
	Eventually(t, 10*time.Second, func() error {
		for _, n := range c.Running() {
			var got []string
			for _, a := range n.Server().Federation().RemoteAgents([]string{peer})[peer] {
				got = append(got, a.GetId())
			}
			if !slices.Equal(got, want) {
				return fmt.Errorf("%s imported from %s: %v, want %v", n, peer, got, want)
			}
		}
		return nil
	})
}

func TestFederation_RoutingAcrossSystems(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	alice := agentOn(t, dc1, 0, "alice", map[string]any{"role": "public"})
	carol := agentOn(t, dc1, 2, "carol", nil)
	bob := agentOn(t, dc2, 2, "bob", nil)
	_ = carol

	// Directory: dc2 exports all, dc1 only role "public" (export filter);
	// every node of the importer resolves the same way.
	waitImported(t, dc1, "dc2", "bob")
	waitImported(t, dc2, "dc1", "alice")

	// map/agents/list shows remote agents only when asked.
	listIDs := func(params map[string]any) []string {
		var res struct {
			Agents []struct{ ID string } `json:"agents"`
		}
		if err := alice.CallInto("map/agents/list", params, &res); err != nil {
			t.Fatalf("agents/list %v: %s", params, Describe(err))
		}
		var ids []string
		for _, a := range res.Agents {
			ids = append(ids, a.ID)
		}
		return ids
	}
	for _, tc := range []struct {
		params map[string]any
		want   []string
	}{
		{map[string]any{}, []string{"alice", "carol"}},
		{map[string]any{"filter": map[string]any{"systems": []string{"dc2"}}}, []string{"dc2:agent:bob"}},
		{map[string]any{"include": map[string]any{"federated": true}}, []string{"alice", "carol", "dc2:agent:bob"}},
		{map[string]any{"filter": map[string]any{"systems": []string{"dc1"}}}, []string{"alice", "carol"}},
	} {
		if got := listIDs(tc.params); !slices.Equal(got, tc.want) {
			t.Fatalf("agents/list %v = %v, want %v", tc.params, got, tc.want)
		}
	}

	// Every address form, each acknowledged by the remote system.
	forms := []any{"dc2:agent:bob", map[string]any{"system": "dc2", "agent": "bob"}}
	for i, to := range forms {
		res, err := alice.Send(map[string]any{"to": to, "payload": map[string]any{"n": i}})
		if err != nil {
			t.Fatalf("send to %v: %s", to, Describe(err))
		}
		if !slices.Equal(res.Delivered, []string{"dc2:agent:bob"}) {
			t.Fatalf("send to %v: delivered %v", to, res.Delivered)
		}
	}
	msgs, err := bob.WaitMessages(len(forms), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range msgs {
		if m.From != "dc1:agent:alice" {
			t.Fatalf("message %d: from %q, want dc1:agent:alice (stamped by the source system)", i, m.From)
		}
		var p struct{ N int }
		if err := json.Unmarshal(m.Payload, &p); err != nil || p.N != i {
			t.Fatalf("message %d out of order or mangled: %s", i, m.Payload)
		}
	}

	// Request/reply across systems with a correlationId: bob answers the
	// from he was given.
	if _, err := bob.Send(map[string]any{"to": msgs[0].From, "payload": "pong",
		"meta": map[string]any{"correlationId": msgs[0].ID, "isResult": true}}); err != nil {
		t.Fatalf("reply: %s", Describe(err))
	}
	got, err := alice.WaitMessages(1, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		CorrelationID string `json:"correlationId"`
	}
	_ = json.Unmarshal(got[0].Meta, &meta)
	if got[0].From != "dc2:agent:bob" || meta.CorrelationID != msgs[0].ID {
		t.Fatalf("reply: from %q correlationId %q, want dc2:agent:bob / %s", got[0].From, meta.CorrelationID, msgs[0].ID)
	}

	// The remote scope forms reach the scope's exported members.
	bob.MustCall("map/scopes/create", map[string]any{"scopeId": "team", "name": "Team"})
	bob.MustCall("map/scopes/join", map[string]any{"scopeId": "team", "agentId": "bob"})
	for _, to := range []any{map[string]any{"system": "dc2", "scope": "team"}, "dc2:scope:team"} {
		// The dc2 node holding the stream may apply the scope a moment
		// after bob's node: retry until it knows it (an unknown scope is
		// 5003, like an unexported one).
		Eventually(t, 5*time.Second, func() error {
			res, err := alice.Send(map[string]any{"to": to, "payload": "to the team"})
			if err != nil || !slices.Equal(res.Delivered, []string{"dc2:agent:bob"}) {
				return fmt.Errorf("send to scope %v: %v %s", to, res, Describe(err))
			}
			return nil
		})
	}
	if _, err := bob.WaitMessages(len(forms)+2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = alice.Send(map[string]any{"to": "dc2:scope:nope", "payload": 1})
	requireMAPError(t, err, rpc.CodeFederationRouteRejected, false)

	// This system's own id reads as a local address.
	if res, err := alice.Send(map[string]any{"to": "dc1:agent:carol", "payload": 1}); err != nil || !slices.Equal(res.Delivered, []string{"carol"}) {
		t.Fatalf("own-system federated form: %v %s", res, Describe(err))
	}

	// Errors: unknown remote agent (from dc2), not exported, no link.
	_, err = alice.Send(map[string]any{"to": "dc2:agent:nobody", "payload": 1})
	requireMAPError(t, err, rpc.CodeAgentNotFound, false)
	_, err = bob.Send(map[string]any{"to": "dc1:agent:carol", "payload": 1})
	requireMAPError(t, err, rpc.CodeFederationRouteRejected, false)
	_, err = alice.Send(map[string]any{"to": map[string]any{"system": "dc9", "agent": "x"}, "payload": 1})
	requireMAPError(t, err, rpc.CodeFederationSystemNotFound, false)

	// Per-link metrics.
	resp, err := http.Get("http://" + dc1.Node(0).HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{`concord_federation_link_up{peer="dc2"} 1`, `concord_federation_imported_agents{peer="dc2"} 1`} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
}

func TestFederation_TokensAndStreamInput(t *testing.T) {
	dc1, dc2 := twoSystems(t)
	ctx, cancel := context.WithTimeout(context.Background(), FormTimeout+CallTimeout) // dc3 starts inside
	defer cancel()

	// An expired token is refused and stores nothing.
	tok, err := dc2.FederationClient(t, 1).CreateToken(ctx, &concordv1.CreateTokenRequest{PeerSystemId: "dc3", TtlMs: 1})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the token's 1 ms life is the scenario
	dc3 := New(t, 1, WithSystem("dc3"), WithInsecure())
	if _, err := dc3.FederationClient(t, 0).CreateLink(ctx, &concordv1.CreateLinkRequest{Token: tok.GetToken()}); err == nil {
		t.Fatal("an expired token was accepted")
	}
	// A token issued for another system, and a reused one, are refused.
	tok, err = dc2.FederationClient(t, 0).CreateToken(ctx, &concordv1.CreateTokenRequest{PeerSystemId: "dc3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc1.FederationClient(t, 0).CreateLink(ctx, &concordv1.CreateLinkRequest{Token: tok.GetToken()}); err == nil {
		t.Fatal("dc1 redeemed a token issued for dc3")
	}
	if _, err := dc3.FederationClient(t, 0).CreateLink(ctx, &concordv1.CreateLinkRequest{Token: tok.GetToken()}); err != nil {
		t.Fatalf("dc3 link: %v", err)
	}
	if res, err := dc3.FederationClient(t, 0).Unlink(ctx, &concordv1.UnlinkRequest{PeerSystemId: "dc2"}); err != nil || !res.GetPeerNotified() {
		t.Fatalf("unlink: %v %v", res, err)
	}
	// dc2 removed its side before answering, on whichever node took the
	// call; node 0 may trail it briefly.
	Eventually(t, 5*time.Second, func() error {
		if _, ok := dc2.Node(0).Server().Federation().State().Link("dc3"); ok {
			return fmt.Errorf("dc2 still links dc3")
		}
		return nil
	})
	if _, err := dc3.FederationClient(t, 0).CreateLink(ctx, &concordv1.CreateLinkRequest{Token: tok.GetToken()}); err == nil {
		t.Fatal("a used token was accepted twice")
	}
	if ls, _ := dc3.FederationClient(t, 0).ListLinks(ctx, &concordv1.ListLinksRequest{}); len(ls.GetLinks()) != 0 {
		t.Fatalf("refused redemption left links behind: %v", ls.GetLinks())
	}
	if _, err := dc2.FederationClient(t, 0).CreateLink(ctx, &concordv1.CreateLinkRequest{Token: "concordfed1.!!"}); err == nil {
		t.Fatal("a garbage token was accepted")
	}

	// Stream input: a forged system id, envelopes that loop, exceed their
	// hops, lie about their source, or are huge, each a clear refusal.
	bob := agentOn(t, dc2, 0, "bob", nil)
	forged, err := dc2.FederationClient(t, 0).Link(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = forged.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Hello{Hello: &concordv1.FedHello{SystemId: "dc7", NodeId: "x"}}})
	if _, err := forged.Recv(); err == nil {
		t.Fatal("a stream claiming an unlinked system was accepted")
	}
	st, err := dc2.FederationClient(t, 1).Link(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Hello{Hello: &concordv1.FedHello{SystemId: "dc1", NodeId: "test"}}}); err != nil {
		t.Fatal(err)
	}
	if f, err := st.Recv(); err != nil || f.GetWelcome().GetSystemId() != "dc2" {
		t.Fatalf("welcome: %v %v", f, err)
	}
	base := func(seq uint64) *concordv1.FedEnvelope {
		return &concordv1.FedEnvelope{Seq: seq, SourceSystem: "dc1", TargetSystem: "dc2", HopCount: 1, MaxHops: 5,
			Path: []string{"dc1"}, MessageId: fmt.Sprint(seq), From: "mallory", ToAgent: "bob", Payload: []byte(`"x"`)}
	}
	loop := base(1)
	loop.Path, loop.HopCount = []string{"dc1", "dc2", "dc1"}, 3
	hops := base(2)
	hops.MaxHops = 0
	spoof := base(3)
	spoof.Path = []string{"dc5"}
	huge := base(4)
	huge.Payload = []byte(`"` + strings.Repeat("x", 2<<20) + `"`)
	ok := base(5)
	want := map[uint64]int32{1: 5010, 2: 5011, 3: -32602, 4: -32602, 5: 0}
	if err := st.Send(&concordv1.FedFrame{Frame: &concordv1.FedFrame_Batch{Batch: &concordv1.FedBatch{
		Envelopes: []*concordv1.FedEnvelope{loop, hops, spoof, huge, ok}}}}); err != nil {
		t.Fatal(err)
	}
	got := map[uint64]int32{}
	for len(got) < len(want) {
		f, err := st.Recv()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range f.GetAcks().GetAcks() {
			got[a.GetSeq()] = a.GetCode()
		}
	}
	for seq, code := range want {
		if got[seq] != code {
			t.Fatalf("envelope %d: ack code %d, want %d (all: %v)", seq, got[seq], code, got)
		}
	}
	ms, err := bob.WaitMessages(1, 5*time.Second)
	if err != nil || len(ms) != 1 || ms[0].From != "dc1:agent:mallory" {
		t.Fatalf("bob got %v %v, want exactly the one valid envelope", ms, err)
	}
}
