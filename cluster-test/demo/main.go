// Command demo is `make demo`: it starts a local 3-node Concord system,
// connects three demo agents to different nodes, runs a debate among them,
// kill -9s the Raft leader in the middle of the debate, shows the run
// resuming on the new leader and finishing, and prints where the result files
// are. It leaves no process behind, also when interrupted.
//
// With --federation it is `make demo-federation` (federation.go): two
// linked systems, a debate across them, faults in both and a link cut.
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/concordmap/concord/node/client/mapclient"
)

type options struct {
	bin   string
	out   string
	task  string
	think time.Duration
	keep  bool
	// federation: `make demo-federation` (federation.go) instead of `make demo`.
	federation bool
	data       string
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/concord", "the concord binary")
	flag.StringVar(&o.out, "out", "out", "where the result files go")
	flag.StringVar(&o.task, "task", "Should a five-person startup run its own Kubernetes cluster or use a managed platform?", "the question the agents debate")
	flag.DurationVar(&o.think, "think", 600*time.Millisecond, "how long each demo agent thinks per task")
	flag.BoolVar(&o.keep, "keep-data", false, "keep the nodes' data directory")
	flag.BoolVar(&o.federation, "federation", false, "two linked systems debate across the link (make demo-federation)")
	flag.StringVar(&o.data, "data", ".data/demo-federation", "--federation: data, logs and certificates of both systems (wiped at start)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	demo := run
	if o.federation {
		demo = runFederation
	}
	if err := demo(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// node is one server process of a demo system.
type node struct {
	id                   string
	http, grpc, raft, gs int
	proc                 *proc
	tls                  *tls.Config // the demo's client side for this node's system
}

func (n *node) url() string { return fmt.Sprintf("wss://127.0.0.1:%d/map", n.http) }

func run(ctx context.Context, o options) error {
	say("Concord demo: 3 nodes, 3 agents, one debate, and a kill -9 of the leader halfway")
	dir, err := os.MkdirTemp("", "concord-demo-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(dir)
	}
	ps := &procs{out: os.Stdout}
	defer func() { say("stopping every process"); ps.stopAll(5 * time.Second) }()

	nodes, err := startSystem(ctx, ps, o.bin, dir, "demo")
	if err != nil {
		return err
	}
	// The agents and `concord argue` (children of this process) trust the
	// demo CA through the environment.
	if err := os.Setenv("CONCORD_CA_FILE", filepath.Join(dir, "tls", "demo-ca.pem")); err != nil {
		return err
	}
	leader, err := currentLeader(ctx, nodes, nil)
	if err != nil {
		return err
	}
	say("system ready; Raft leader is %s (logs in %s)", leader.id, dir)

	agents := []string{"alice", "bob", "carol"}
	for i, name := range agents {
		servers := fmt.Sprintf("%s,%s,%s", nodes[i].url(), nodes[(i+1)%3].url(), nodes[(i+2)%3].url())
		if _, err := ps.start(name, "", filepath.Join(dir, name+".log"), o.bin, "agent", "--name", name,
			"--persona", personas[i], "--think", o.think.String(), "--server", servers); err != nil {
			return err
		}
		say("agent %s connects to %s", name, nodes[i].id)
	}
	if err := waitAgents(ctx, nodes[0], agents); err != nil {
		return err
	}

	requestID := fmt.Sprintf("demo-%d", time.Now().Unix())
	say("starting the debate %q (request %s)", o.task, requestID)
	argue, err := ps.start("argue", "    | ", filepath.Join(dir, "argue.log"), o.bin, "argue", "run",
		"--task", o.task, "--agents", "alice,bob,carol", "--request-id", requestID,
		"--min-rounds", "2", "--max-rounds", "3", "--out", o.out,
		"--server", fmt.Sprintf("%s,%s,%s", nodes[2].url(), nodes[1].url(), nodes[0].url()))
	if err != nil {
		return err
	}
	k, err := killLeaderMidDebate(ctx, nodes, requestID, func(before runView, leader *node) {
		say("debate round %d is under way (%d engine events so far): kill -9 the leader %s (pid %d)",
			before.Round, before.State.EventCount, leader.id, leader.proc.cmd.Process.Pid)
	})
	if err != nil {
		return err
	}
	say("new leader %s elected %d ms after the kill; the run moved on %d ms after the kill (phase %s, round %d)",
		k.next.id, k.elected.Milliseconds(), k.movedOn.Milliseconds(), k.after.Phase, k.after.Round)
	if err := argueDone(ctx, argue); err != nil {
		return err
	}
	say("debate finished after the failover; result files:")
	for _, f := range []string{"result.json", "events.jsonl", "summary.md"} {
		fmt.Printf("    %s\n", filepath.Join(o.out, requestID, f))
	}
	return nil
}

// argueDone waits for `concord argue run` to end (3 minutes at most) and
// reports its failure.
func argueDone(ctx context.Context, argue *proc) error {
	select {
	case <-argue.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(3 * time.Minute):
		return errors.New("the debate did not finish within 3 minutes")
	}
	if argue.err != nil {
		return fmt.Errorf("concord argue run: %w", argue.err)
	}
	return nil
}

var personas = []string{"default", "default", "default"}

// startSystem starts a system of 3 TLS nodes named node1..node3 with data,
// logs and certificates under dir, and waits until each is ready.
func startSystem(ctx context.Context, ps *procs, bin, dir, system string) ([]*node, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := freePorts(12)
	if err != nil {
		return nil, err
	}
	key, err := exec1(bin, "keygen")
	if err != nil {
		return nil, err
	}
	// The key goes to the nodes in a file: secrets stay off the command line.
	keyFile := filepath.Join(dir, "gossip.key")
	if err := os.WriteFile(keyFile, []byte(key), 0o600); err != nil {
		return nil, fmt.Errorf("write gossip key: %w", err)
	}
	tlsDir := filepath.Join(dir, "tls")
	ctls, err := makeTLS(bin, tlsDir, system)
	if err != nil {
		return nil, err
	}
	say("%s: created a throwaway CA and certificates in %s: every port runs TLS", system, tlsDir)
	nodes := make([]*node, 3)
	var gossip []int
	for i := range nodes {
		nodes[i] = &node{id: fmt.Sprintf("node%d", i+1), http: ports[4*i], grpc: ports[4*i+1], raft: ports[4*i+2], gs: ports[4*i+3], tls: ctls}
		gossip = append(gossip, nodes[i].gs)
	}
	for _, n := range nodes {
		p, err := ps.start(system+"/"+n.id, "", filepath.Join(dir, n.id+".log"), bin, "server",
			"--node-id", n.id, "--system-id", system, "--data-dir", filepath.Join(dir, n.id),
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", n.http), "--grpc-addr", fmt.Sprintf("127.0.0.1:%d", n.grpc),
			"--raft-addr", fmt.Sprintf("127.0.0.1:%d", n.raft), "--gossip-addr", fmt.Sprintf("127.0.0.1:%d", n.gs),
			"--join", joinHosts(gossip), "--bootstrap-expect", "3", "--gossip-key-file", keyFile,
			"--tls-ca-file", filepath.Join(tlsDir, system+"-ca.pem"),
			"--tls-cert-file", filepath.Join(tlsDir, system+"-server-"+n.id+".pem"),
			"--tls-key-file", filepath.Join(tlsDir, system+"-server-"+n.id+"-key.pem"),
			// A throwaway local system: its demo agents and `concord argue`
			// connect without credentials (the explicit anonymous policy).
			"--allow-anonymous", "agent,client")
		if err != nil {
			return nil, err
		}
		n.proc = p
		say("%s: started %s (MAP %s)", system, n.id, n.url())
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, n := range nodes {
		if err := waitHTTP(wctx, n.get, fmt.Sprintf("https://127.0.0.1:%d/v1/ready", n.http)); err != nil {
			return nil, err
		}
	}
	return nodes, nil
}

func exec1(bin string, args ...string) (string, error) {
	out, err := execOutput(bin, args...)
	if err != nil {
		return "", fmt.Errorf("%s %v: %w", bin, args, err)
	}
	return string(trimNL(out)), nil
}

func say(format string, args ...any) {
	fmt.Printf("[demo %s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// get fetches url of n's HTTP API with the demo's client certificate.
func (n *node) get(url string) (int, []byte, error) {
	c := http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: n.tls}}
	resp, err := c.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// currentLeader asks the live nodes who leads until they name one that is
// not in exclude.
func currentLeader(ctx context.Context, nodes []*node, exclude *node) (*node, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		for _, n := range nodes {
			if n == exclude {
				continue
			}
			_, body, err := n.get(fmt.Sprintf("https://127.0.0.1:%d/v1/status", n.http))
			var st struct{ LeaderID string }
			if err == nil && json.Unmarshal(body, &st) == nil {
				for _, l := range nodes {
					if l.id == st.LeaderID && l != exclude {
						return l, nil
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, errors.New("no leader elected")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitAgents waits until every demo agent is registered.
func waitAgents(ctx context.Context, n *node, names []string) error {
	return waitListed(ctx, n, names, map[string]any{})
}

// waitListed waits until map/agents/list with params, asked on n, lists
// every id in names.
func waitListed(ctx context.Context, n *node, names []string, params map[string]any) error {
	c, err := dialClient(ctx, n)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var res struct{ Agents []struct{ ID string } }
		if err := c.CallResult(ctx, "map/agents/list", params, &res); err == nil {
			seen := map[string]bool{}
			for _, a := range res.Agents {
				seen[a.ID] = true
			}
			missing := false
			for _, id := range names {
				missing = missing || !seen[id]
			}
			if !missing {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agents %v are not all listed on %s", names, n.id)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func dialClient(ctx context.Context, n *node) (*mapclient.Client, error) {
	cfg := mapclient.DefaultConfig()
	cfg.URLs = []string{n.url()}
	cfg.RPC.TLSConfig = n.tls
	cfg.Name = "demo-observer"
	return mapclient.Dial(ctx, cfg)
}
