package clustertest

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/concordmap/concord/cluster-test/wannet"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// WANShape is the WAN of the process-level federation tests: 25 ms each
// way (a 50 ms round trip), ±2 ms jitter and 1% packet loss.
var WANShape = wannet.Shape{Delay: 25 * time.Millisecond, Jitter: 2 * time.Millisecond, Loss: 0.01}

// RequireWAN skips t, naming the reason, when network namespaces cannot
// be made here (not root, no iproute2, no TUN); with
// CONCORD_REQUIRE_NETNS set (CI on a machine that has them) it fails
// instead, so the WAN tests never silently stop running.
func RequireWAN(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("clustertest: WAN process tests skipped with -short")
	}
	if err := wannet.Available(); err != nil {
		if os.Getenv("CONCORD_REQUIRE_NETNS") != "" {
			t.Fatalf("clustertest: CONCORD_REQUIRE_NETNS is set but %v", err)
		}
		t.Skipf("clustertest: %v", err)
	}
}

// WAN is several systems of real concord processes, each system in its
// own network namespace, every pair joined by an emulated WAN link.
// Everything (processes, forwarders, links, namespaces) is torn down at
// t's cleanup, failed test or not.
type WAN struct {
	systems map[string]*ProcCluster
	links   map[[2]string]*wannet.Link
}

// StartWAN starts one system of n processes (TLS on, its own CA) per id,
// each in a namespace of its own, and joins every pair with shape. The
// systems are not linked yet (Peer does that). It skips like RequireWAN.
func StartWAN(t testing.TB, n int, shape wannet.Shape, ids ...string) *WAN {
	t.Helper()
	return StartWANWith(t, n, shape, nil, ids...)
}

// StartWANWith is StartWAN with options for every system's processes
// (WithProcBinary: an older build).
func StartWANWith(t testing.TB, n int, shape wannet.Shape, opts []ProcOption, ids ...string) *WAN {
	t.Helper()
	RequireWAN(t)
	w := &WAN{systems: map[string]*ProcCluster{}, links: map[[2]string]*wannet.Link{}}
	var spaces []*wannet.Namespace
	for k, id := range ids {
		ns, err := wannet.NewNamespace(id, netip.AddrFrom4([4]byte{10, 77, 0, byte(k + 1)}))
		if err != nil {
			t.Fatalf("clustertest: %v", err)
		}
		// Registered before the processes: cleanups run last-in first-out,
		// so the namespace goes after its processes are dead.
		t.Cleanup(func() {
			if err := ns.Close(); err != nil {
				t.Errorf("clustertest: %v", err)
			}
		})
		spaces = append(spaces, ns)
	}
	for i := range spaces {
		for j := i + 1; j < len(spaces); j++ {
			l, err := wannet.Connect(spaces[i], spaces[j], shape)
			if err != nil {
				t.Fatalf("clustertest: %v", err)
			}
			t.Cleanup(func() { _ = l.Close() })
			w.links[[2]string{ids[i], ids[j]}] = l
		}
	}
	for k, id := range ids {
		w.systems[id] = StartProcs(t, n, append(slices.Clone(opts), withProcNamespace(id, spaces[k]))...)
	}
	return w
}

// System returns the processes of system id.
func (w *WAN) System(id string) *ProcCluster { return w.systems[id] }

// Link returns the link between systems a and b (either order).
func (w *WAN) Link(a, b string) *wannet.Link {
	if l, ok := w.links[[2]string{a, b}]; ok {
		return l
	}
	return w.links[[2]string{b, a}]
}

// Peer links two systems the way an operator does, with the CLI: `concord
// federation token --peer FROM` against a server of `to`, then `concord
// federation link --peering-token-file` against a server of `from`, each as that
// system's operator. flags (e.g. --export all, --buffer-messages N) are
// given to both commands.
func (w *WAN) Peer(t testing.TB, from, to string, flags ...string) {
	t.Helper()
	bin := ConcordBinary(t)
	tok, err := runConcord(t, bin, OperatorEnvFor(t, to), append([]string{"federation", "token", "--peer", from,
		"--addr", w.systems[to].Proc(0).GRPCAddr}, flags...)...)
	if err != nil {
		t.Fatalf("clustertest: federation token on %s: %v\n%s", to, err, tok)
	}
	tokFile := filepath.Join(t.TempDir(), "peering-token")
	if err := os.WriteFile(tokFile, []byte(strings.TrimSpace(tok)), 0o600); err != nil {
		t.Fatalf("clustertest: write peering token: %v", err)
	}
	out, err := runConcord(t, bin, OperatorEnvFor(t, from), append([]string{"federation", "link", "--peering-token-file", tokFile,
		"--addr", w.systems[from].Proc(1).GRPCAddr}, flags...)...)
	if err != nil {
		t.Fatalf("clustertest: federation link %s -> %s: %v\n%s", from, to, err, out)
	}
}

// runConcord runs the concord binary with args and extra environment,
// bounded by ConvergeTimeout, and returns its combined output.
func runConcord(t testing.TB, bin string, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ConvergeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// FedLinks returns process i's view of its links (its own stream to each
// peer: state, server, counters), read as the system's operator.
func (pc *ProcCluster) FedLinks(i int) ([]*concordv1.FedLinkStatus, error) {
	cc, err := grpc.NewClient(pc.procs[i].GRPCAddr, grpc.WithTransportCredentials(credentials.NewTLS(tlstest.ClientTLS(pc.system, "operator"))))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", pc.procs[i], err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), CallTimeout)
	defer cancel()
	res, err := concordv1.NewFederationClient(cc).ListLinks(ctx, &concordv1.ListLinksRequest{})
	if err != nil {
		return nil, fmt.Errorf("list links on %s: %w", pc.procs[i], err)
	}
	return res.GetLinks(), nil
}

// StreamTo returns the process of peer that process i's stream to peer's
// system is connected to, or an error while it has none (an Eventually
// check).
func (pc *ProcCluster) StreamTo(i int, peer *ProcCluster) (*Proc, error) {
	links, err := pc.FedLinks(i)
	if err != nil {
		return nil, err
	}
	for _, st := range links {
		if st.GetLink().GetPeerSystemId() != peer.system {
			continue
		}
		if st.GetState() != "up" {
			return nil, fmt.Errorf("%s: link to %s is %q", pc.procs[i], peer.system, st.GetState())
		}
		for _, p := range peer.procs {
			if p.PeerGRPCAddr == st.GetConnectedTo() {
				return p, nil
			}
		}
		return nil, fmt.Errorf("%s: connected to %q, not a server of %s", pc.procs[i], st.GetConnectedTo(), peer.system)
	}
	return nil, fmt.Errorf("%s has no link to %s", pc.procs[i], peer.system)
}

// LinkUp returns nil once every running process has its stream to peer
// up (an Eventually check).
func (pc *ProcCluster) LinkUp(peer *ProcCluster) error {
	for _, p := range pc.Running() {
		if _, err := pc.StreamTo(p.Index, peer); err != nil {
			return err
		}
	}
	return nil
}
