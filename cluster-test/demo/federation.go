package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/concordmap/concord/node/client/admin"
)

// `make demo-federation`: systems dc1 and dc2 (3 TLS nodes each, data,
// logs and certificates under --data) are linked with a one-time token
// through `concord federation`, two demo agents connect to each, and one
// debate homed in dc1 runs across both. Mid-debate the demo kill -9s dc1's
// leader (the run's home), then the dc2 server holding the new home
// leader's stream, then cuts the link (`concord federation unlink`, both
// sides drop it) and links again with a fresh token a few seconds later.
// The run finishes; the demo prints the timeline and the result files, and
// stops every process it started.

// timeline records what happened, with the time since the demo started.
type timeline struct {
	start time.Time
	lines []string
}

func (tl *timeline) mark(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	say("%s", msg)
	tl.lines = append(tl.lines, fmt.Sprintf("  +%6.1fs  %s", time.Since(tl.start).Seconds(), msg))
}

// linkCut is how long the systems stay cut apart: far below the debate's
// round timeout, so nobody is eliminated.
const linkCut = 4 * time.Second

func runFederation(ctx context.Context, o options) error {
	tl := &timeline{start: time.Now()}
	say("Concord federation demo: dc1 and dc2 (3 nodes each) linked, a debate across them, a kill -9 in each system and a link cut")
	if err := os.RemoveAll(o.data); err != nil {
		return err
	}
	ps := &procs{out: os.Stdout}
	defer func() { say("stopping every process"); ps.stopAll(5 * time.Second) }()

	dc1, err := startSystem(ctx, ps, o.bin, filepath.Join(o.data, "dc1"), "dc1")
	if err != nil {
		return err
	}
	dc2, err := startSystem(ctx, ps, o.bin, filepath.Join(o.data, "dc2"), "dc2")
	if err != nil {
		return err
	}
	tl.mark("dc1 and dc2 ready (logs under %s)", o.data)
	if err := linkSystems(o, dc1[0], dc2[0]); err != nil {
		return err
	}
	tl.mark("linked: `concord federation token --peer dc1` on dc2, `concord federation link --peering-token-file F` on dc1")

	home := map[string][]*node{"dc1": dc1, "dc2": dc2}
	for _, a := range []struct {
		name, system string
		at           int
	}{{"alice", "dc1", 0}, {"bob", "dc1", 1}, {"carol", "dc2", 1}, {"dave", "dc2", 2}} {
		nodes := home[a.system]
		servers := fmt.Sprintf("%s,%s,%s", nodes[a.at].url(), nodes[(a.at+1)%3].url(), nodes[(a.at+2)%3].url())
		if _, err := ps.start(a.name, "", filepath.Join(o.data, a.system, a.name+".log"), o.bin, "agent", "--name", a.name,
			"--persona", "default", "--think", o.think.String(), "--server", servers, "--ca-file", caFile(o, a.system)); err != nil {
			return err
		}
		say("agent %s connects to %s/%s", a.name, a.system, nodes[a.at].id)
	}
	if err := waitAgents(ctx, dc1[0], []string{"alice", "bob"}); err != nil {
		return err
	}
	if err := waitAgents(ctx, dc2[0], []string{"carol", "dave"}); err != nil {
		return err
	}
	if err := waitListed(ctx, dc1[0], []string{"dc2:agent:carol", "dc2:agent:dave"}, map[string]any{"filter": map[string]any{"systems": []string{"dc2"}}}); err != nil {
		return err
	}
	tl.mark("agents alice, bob in dc1 and carol, dave in dc2; dc1 imported dc2:agent:carol and dc2:agent:dave")

	requestID := fmt.Sprintf("demo-fed-%d", time.Now().Unix())
	agents := "alice,bob,dc2:agent:carol,dc2:agent:dave"
	tl.mark("start the debate in dc1: concord argue run --agents %s (request %s)", agents, requestID)
	argue, err := ps.start("argue", "    | ", filepath.Join(o.data, "argue.log"), o.bin, "argue", "run",
		"--task", o.task, "--agents", agents, "--request-id", requestID,
		"--min-rounds", "3", "--max-rounds", "4", "--per-task-timeout", "40s", "--per-round-timeout", "60s", "--out", o.out,
		"--server", fmt.Sprintf("%s,%s,%s", dc1[2].url(), dc1[1].url(), dc1[0].url()), "--ca-file", caFile(o, "dc1"))
	if err != nil {
		return err
	}
	if err := federationFaults(ctx, o, tl, dc1, dc2, requestID); err != nil {
		return err
	}
	if err := argueDone(ctx, argue); err != nil {
		return err
	}
	tl.mark("debate finished in dc1 with participants of both systems")
	fmt.Println("\ntimeline:")
	fmt.Println(strings.Join(tl.lines, "\n"))
	fmt.Println("\nresult files:")
	for _, f := range []string{"result.json", "events.jsonl", "summary.md"} {
		fmt.Printf("    %s\n", filepath.Join(o.out, requestID, f))
	}
	fmt.Printf("node and agent logs: %s/{dc1,dc2}/*.log\n", o.data)
	return nil
}

func caFile(o options, system string) string {
	return filepath.Join(o.data, system, "tls", system+"-ca.pem")
}

// adminArgs are the connection flags of `concord federation` against n of
// system: its gRPC port, the system CA and the operator certificate.
func adminArgs(o options, system string, n *node) []string {
	dir := filepath.Join(o.data, system, "tls")
	return []string{"--addr", fmt.Sprintf("127.0.0.1:%d", n.grpc), "--ca-file", caFile(o, system),
		"--cert-file", filepath.Join(dir, system+"-client-demo.pem"), "--key-file", filepath.Join(dir, system+"-client-demo-key.pem")}
}

// linkSystems links dc1 with dc2 the way an operator does: a one-time
// token issued on dc2 for dc1, redeemed on dc1; each exports all its
// agents to the other.
func linkSystems(o options, on1, on2 *node) error {
	token, err := exec1(o.bin, append([]string{"federation", "token", "--peer", "dc1", "--export", "all"}, adminArgs(o, "dc2", on2)...)...)
	if err != nil {
		return err
	}
	// The token is a secret: it goes to the CLI in a 0600 file, never argv.
	f, err := os.CreateTemp("", "concord-peering-token-*")
	if err != nil {
		return fmt.Errorf("peering token file: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(token); err != nil {
		f.Close()
		return fmt.Errorf("peering token file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("peering token file: %w", err)
	}
	_, err = exec1(o.bin, append([]string{"federation", "link", "--peering-token-file", f.Name(), "--export", "all"}, adminArgs(o, "dc1", on1)...)...)
	return err
}

// federationFaults injects the three faults, each once the run has moved
// on from the previous one.
func federationFaults(ctx context.Context, o options, tl *timeline, dc1, dc2 []*node, requestID string) error {
	// 1. kill -9 of the home leader.
	k, err := killLeaderMidDebate(ctx, dc1, requestID, func(before runView, leader *node) {
		tl.mark("debate round %d (%d engine events): kill -9 dc1's leader %s, the run's home (pid %d)",
			before.Round, before.State.EventCount, leader.id, leader.proc.cmd.Process.Pid)
	})
	if err != nil {
		return err
	}
	leader, next := k.leader, k.next
	tl.mark("dc1 elected %s in %d ms; its driver re-sent the open tasks and the run moved on %d ms after the kill (round %d)",
		next.id, k.elected.Milliseconds(), k.movedOn.Milliseconds(), k.after.Round)
	c, err := dialClient(ctx, next)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())

	// 2. kill -9 of the dc2 server the home leader's stream is on.
	holder, err := streamHolder(ctx, next, "dc2", dc2)
	if err != nil {
		return err
	}
	now, err := waitRun(ctx, c, requestID, func(runView) bool { return true })
	if err != nil {
		return err
	}
	tl.mark("kill -9 dc2's %s, which holds the stream of dc1's leader %s to dc2 (pid %d)", holder.id, next.id, holder.proc.cmd.Process.Pid)
	killed := time.Now()
	holder.proc.kill9()
	moved, err := waitRun(ctx, c, requestID, func(r runView) bool { return r.State.EventCount > now.State.EventCount })
	if err != nil {
		return err
	}
	where := "another dc2 server"
	if h, err := streamHolder(ctx, next, "dc2", dc2); err == nil {
		where = h.id
	}
	tl.mark("the stream moved to %s; the run moved on %d ms after the kill (round %d)", where, time.Since(killed).Milliseconds(), moved.Round)

	// 3. the link cut: both sides drop the link, then a fresh token links
	// them again.
	var live1, live2 *node
	for _, n := range dc1 {
		if n != leader {
			live1 = n
		}
	}
	for _, n := range dc2 {
		if n != holder {
			live2 = n
		}
	}
	if _, err := exec1(o.bin, append([]string{"federation", "unlink", "dc2"}, adminArgs(o, "dc1", live1)...)...); err != nil {
		return err
	}
	cut, _ := waitRun(ctx, c, requestID, func(runView) bool { return true })
	tl.mark("link cut: `concord federation unlink dc2` on dc1 (dc2 drops its side too) in round %d; tasks and answers wait", cut.Round)
	select {
	case <-time.After(linkCut):
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := linkSystems(o, live1, live2); err != nil {
		return err
	}
	healed := time.Now()
	tl.mark("linked again after %v with a fresh token", linkCut)
	// A round ends only with every participant's answer or timeout: the
	// next round (or phase) means dc2's answers crossed the new link.
	resumed, err := waitRun(ctx, c, requestID, func(r runView) bool {
		return r.Round > cut.Round || r.Phase != cut.Phase || r.Status != "running"
	})
	if err != nil {
		return err
	}
	tl.mark("round %d (%s) closed with dc2's answers %d ms after the link came back; now %s round %d",
		cut.Round, cut.Phase, time.Since(healed).Milliseconds(), resumed.Phase, resumed.Round)
	return nil
}

// streamHolder asks n (over the admin API) which server of peer its stream
// is connected to.
func streamHolder(ctx context.Context, n *node, peer string, peerNodes []*node) (*node, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", n.grpc), grpc.WithTransportCredentials(credentials.NewTLS(n.tls)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		links, err := admin.New(conn).ListLinks(ctx)
		if err == nil {
			for _, l := range links.Links {
				for _, pn := range peerNodes {
					if l.PeerSystemID == peer && l.State == "up" && l.ConnectedTo == fmt.Sprintf("127.0.0.1:%d", pn.grpc) {
						return pn, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s has no stream up to %s", n.id, peer)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
