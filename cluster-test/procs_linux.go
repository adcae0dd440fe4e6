package clustertest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/concordmap/concord/cluster-test/wannet"
	"github.com/concordmap/concord/node/tlsconf/tlstest"
)

// ProcCluster runs real `concord server` processes on 127.0.0.1, each in
// its own process group, killed (SIGKILL to the group) at t's cleanup
// even when the test fails; with Pdeathsig they also die if the test
// binary itself is killed. Their logs go to files in t.TempDir(), printed
// (tail) when the test fails.
type ProcCluster struct {
	t      testing.TB
	procs  []*Proc
	Ledger *Ledger
	issuer *Issuer // every process trusts its tokens (--jwt-jwks-file)
	token  string
	system string
	// ns, when set, holds every process (StartWAN); forwards carry the
	// test's connections into it.
	ns       *wannet.Namespace
	forwards []*wannet.Forwarder
	// http reads /v1 as the system's operator.
	http *http.Client
}

// Proc is one server process. Its addresses and data dir stay the same
// across restarts.
type Proc struct {
	Index int
	ID    string
	Dir   string
	// Addresses, host:port on 127.0.0.1 where the test reaches them. In a
	// namespace (StartWAN) HTTPAddr and GRPCAddr are forwarders into it
	// and RaftAddr and GossipAddr exist only inside.
	HTTPAddr, GRPCAddr, RaftAddr, GossipAddr string
	// PeerGRPCAddr is the gRPC address other nodes and linked systems
	// dial (GRPCAddr outside a namespace).
	PeerGRPCAddr string
	// InnerHTTPAddr is the HTTP address inside the namespace (HTTPAddr
	// outside one): clients that dial through the namespace (no
	// forwarder hop) use it.
	InnerHTTPAddr string
	// LogPath collects the process's stdout and stderr (appended across
	// restarts).
	LogPath string

	args []string
	bin  string // the binary the next start runs (Upgrade changes it)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when the current process has been reaped
}

// MAPURL is the process's MAP WebSocket endpoint (TLS: clients trust the
// test CA, ClientTLS).
func (p *Proc) MAPURL() string { return "wss://" + p.HTTPAddr + "/map" }

// Running reports whether the process is alive (started and not reaped).
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *Proc) String() string { return fmt.Sprintf("%s(proc #%d)", p.ID, p.Index) }

// ProcOption adjusts a process cluster.
type ProcOption func(*procOptions)

type procOptions struct {
	extra  func(i int) []string
	system string
	ns     *wannet.Namespace
	bin    string
}

// WithProcBinary runs the processes from bin (for example an older build,
// ConcordBinaryAt) instead of the current tree's binary.
func WithProcBinary(bin string) ProcOption {
	return func(o *procOptions) { o.bin = bin }
}

// WithProcArgs appends flags to node i's command line (after the
// harness's own), e.g. --dead-server-cleanup.
func WithProcArgs(f func(i int) []string) ProcOption {
	return func(o *procOptions) { o.extra = f }
}

// withProcNamespace runs the processes of a system inside ns, bound to
// its address (StartWAN).
func withProcNamespace(system string, ns *wannet.Namespace) ProcOption {
	return func(o *procOptions) { o.system, o.ns = system, ns }
}

// StartProcs builds concord (once per test binary) and starts n server
// processes with --bootstrap-expect n, joining the first three's gossip
// addresses with an encrypted gossip key, and waits until every one
// answers /v1/ready. Under -short it skips the test.
func StartProcs(t testing.TB, n int, opts ...ProcOption) *ProcCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("clustertest: process cluster skipped with -short")
	}
	var o procOptions
	for _, opt := range opts {
		opt(&o)
	}
	system := SystemID
	if o.system != "" {
		system = o.system
	}
	bin := o.bin
	if bin == "" {
		bin = ConcordBinary(t)
	}
	pc := &ProcCluster{t: t, Ledger: &Ledger{}, issuer: NewIssuer(t), system: system, ns: o.ns}
	pc.http = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: tlstest.ClientTLS(system, "operator")}}
	pc.token = pc.issuer.Token("clustertest", "*")
	t.Cleanup(pc.Close)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	base := t.TempDir()
	keyFile := filepath.Join(base, "gossip.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(key)), 0o600); err != nil {
		t.Fatalf("clustertest: write gossip key: %v", err)
	}
	for i := range n {
		id := fmt.Sprintf("p%d", i+1)
		p := &Proc{Index: i, ID: id, Dir: filepath.Join(base, id), LogPath: filepath.Join(base, id+".log"), bin: bin}
		if o.ns == nil {
			p.HTTPAddr, p.GRPCAddr = reservePort(t, false), reservePort(t, false)
			p.RaftAddr, p.GossipAddr = reservePort(t, false), reservePort(t, true)
		} else { // a fresh namespace: every port is free
			at := func(k int) string { return net.JoinHostPort(o.ns.IP.String(), strconv.Itoa(nsBasePort+10*i+k)) }
			p.HTTPAddr, p.GRPCAddr, p.RaftAddr, p.GossipAddr = at(0), at(1), at(2), at(3)
		}
		p.PeerGRPCAddr, p.InnerHTTPAddr = p.GRPCAddr, p.HTTPAddr
		pc.procs = append(pc.procs, p)
	}
	var seeds []string
	for _, p := range pc.procs[:min(3, n)] {
		seeds = append(seeds, p.GossipAddr)
	}
	for _, p := range pc.procs {
		tlsArgs, err := systemTLSArgs(base, system, p.ID)
		if err != nil {
			t.Fatalf("clustertest: %v", err)
		}
		p.args = []string{"server",
			"--node-id", p.ID, "--system-id", system, "--data-dir", p.Dir,
			"--http-addr", p.HTTPAddr, "--grpc-addr", p.GRPCAddr,
			"--raft-addr", p.RaftAddr, "--gossip-addr", p.GossipAddr,
			"--join", strings.Join(seeds, ","), "--bootstrap-expect", strconv.Itoa(n),
			"--gossip-key-file", keyFile,
		}
		p.args = append(p.args, pc.issuer.Flags()...)
		p.args = append(p.args, tlsArgs...)
		if o.extra != nil {
			p.args = append(p.args, o.extra(p.Index)...)
		}
		if err := pc.start(p); err != nil {
			t.Fatalf("clustertest: %v", err)
		}
	}
	if o.ns != nil {
		pc.forwardInto(t)
	}
	for _, p := range pc.procs {
		pc.WaitReady(t, p.Index)
	}
	return pc
}

// nsBasePort is node i's first port inside a namespace (HTTP; gRPC,
// Raft and gossip follow), 10 apart per node.
const nsBasePort = 7700

// forwardInto points each process's HTTPAddr and GRPCAddr at a forwarder
// from the host's loopback into the namespace, where the test, the CLI
// and the harness's HTTP client reach them.
func (pc *ProcCluster) forwardInto(t testing.TB) {
	t.Helper()
	for _, p := range pc.procs {
		for _, addr := range []*string{&p.HTTPAddr, &p.GRPCAddr} {
			f, err := pc.ns.Forward(*addr)
			if err != nil {
				t.Fatalf("clustertest: %v", err)
			}
			pc.forwards = append(pc.forwards, f)
			*addr = f.Addr
		}
	}
}

// Token is a bearer token every process accepts (map/connect auth).
func (pc *ProcCluster) Token() string { return pc.token }

// SystemID is the processes' system id.
func (pc *ProcCluster) SystemID() string { return pc.system }

// Namespace is the network namespace holding the processes (nil outside
// StartWAN).
func (pc *ProcCluster) Namespace() *wannet.Namespace { return pc.ns }

// Proc returns process i.
func (pc *ProcCluster) Proc(i int) *Proc { return pc.procs[i] }

// Procs returns every process, running or not.
func (pc *ProcCluster) Procs() []*Proc { return append([]*Proc(nil), pc.procs...) }

// Running returns the processes that are alive.
func (pc *ProcCluster) Running() []*Proc {
	var out []*Proc
	for _, p := range pc.procs {
		if p.Running() {
			out = append(out, p)
		}
	}
	return out
}

// start spawns p in its own process group.
func (pc *ProcCluster) start(p *Proc) error {
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open log of %s: %w", p, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	if pc.ns != nil {
		cmd = pc.ns.Command(p.bin, p.args...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Setpgid: signals go to the whole group. Pdeathsig: the kernel kills
	// the process if the test binary dies without running cleanups (a
	// -timeout panic), so nothing outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("start %s: %w", p, err)
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	go func() { // reaper, owned by the Proc: it ends when the process does
		_ = cmd.Wait()
		_ = logf.Close()
		close(exited)
	}()
	return nil
}

// signal sends sig to p's process group and waits up to wait for it to
// exit; it reports whether it did.
func (p *Proc) signal(sig syscall.Signal, wait time.Duration) bool {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return true
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-exited:
		return true
	case <-time.After(wait):
		return false
	}
}

// Kill9 sends SIGKILL to process i's group and waits until it is reaped.
func (pc *ProcCluster) Kill9(t testing.TB, i int) {
	t.Helper()
	if !pc.procs[i].signal(syscall.SIGKILL, ProcStopTimeout) {
		t.Fatalf("clustertest: %s still running after SIGKILL", pc.procs[i])
	}
}

// Stop sends SIGTERM (graceful shutdown) and SIGKILL after
// ProcStopTimeout; it fails t if the process needed the SIGKILL.
func (pc *ProcCluster) Stop(t testing.TB, i int) {
	t.Helper()
	p := pc.procs[i]
	if !p.signal(syscall.SIGTERM, ProcStopTimeout) {
		p.signal(syscall.SIGKILL, ProcStopTimeout)
		t.Errorf("clustertest: %s ignored SIGTERM for %v", p, ProcStopTimeout)
	}
}

// Restart starts process i again with the same flags and data dir and
// waits until it is ready.
func (pc *ProcCluster) Restart(t testing.TB, i int) {
	t.Helper()
	p := pc.procs[i]
	if p.Running() {
		t.Fatalf("clustertest: restart %s: still running", p)
	}
	if err := pc.start(p); err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	pc.WaitReady(t, i)
}

// Upgrade stops process i gracefully and starts it again from bin with
// the same flags and data dir (a rolling upgrade's step), and waits until
// it is ready.
func (pc *ProcCluster) Upgrade(t testing.TB, i int, bin string) {
	t.Helper()
	pc.Stop(t, i)
	pc.procs[i].bin = bin
	pc.Restart(t, i)
}

// WaitReady waits until process i answers /v1/ready with 200.
func (pc *ProcCluster) WaitReady(t testing.TB, i int) {
	t.Helper()
	p := pc.procs[i]
	Eventually(t, ProcReadyTimeout, func() error {
		if !p.Running() {
			return Permanent(fmt.Errorf("%s exited; log tail:\n%s", p, tail(p.LogPath, 40)))
		}
		code, body, err := pc.get(p.HTTPAddr, "/v1/ready")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("%s /v1/ready: %d %s", p, code, body)
		}
		return nil
	})
}

// ProcStatus is the part of /v1/status the harness reads.
type ProcStatus struct {
	NodeID   string            `json:"nodeId"`
	LeaderID string            `json:"leaderId"`
	Raft     map[string]string `json:"raft"`
}

// Status reads process i's /v1/status.
func (pc *ProcCluster) Status(i int) (ProcStatus, error) {
	var st ProcStatus
	code, body, err := pc.get(pc.procs[i].HTTPAddr, "/v1/status")
	if err != nil {
		return st, err
	}
	if code != http.StatusOK {
		return st, fmt.Errorf("/v1/status: %d %s", code, body)
	}
	return st, json.Unmarshal(body, &st)
}

// Leader waits until every running process names the same leader, which
// reports itself leader, and returns it.
func (pc *ProcCluster) Leader(t testing.TB) *Proc {
	t.Helper()
	var leader *Proc
	Eventually(t, LeaderTimeout, func() error {
		var err error
		leader, err = pc.agreedLeader()
		return err
	})
	return leader
}

func (pc *ProcCluster) agreedLeader() (*Proc, error) {
	running := pc.Running()
	if len(running) == 0 {
		return nil, errors.New("no running process")
	}
	id := ""
	for _, p := range running {
		st, err := pc.Status(p.Index)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if st.LeaderID == "" || (id != "" && st.LeaderID != id) {
			return nil, fmt.Errorf("%s follows %q, others %q", p, st.LeaderID, id)
		}
		id = st.LeaderID
	}
	for _, p := range running {
		if p.ID == id {
			if st, err := pc.Status(p.Index); err == nil && st.Raft["state"] == "Leader" {
				return p, nil
			}
			return nil, fmt.Errorf("%s is named leader but does not lead", p)
		}
	}
	return nil, fmt.Errorf("leader %s is not running", id)
}

// Connect dials process i and calls map/connect (retrying retryable
// errors for CallTimeout), recording writes in the cluster's ledger.
func (pc *ProcCluster) Connect(t testing.TB, i int, params map[string]any) *Client {
	t.Helper()
	cl, err := dialTLS(t, pc.procs[i].MAPURL(), pc.Ledger, tlstest.ClientTLS(pc.system, ""))
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	cl.SetToken(pc.token)
	err = Poll(context.Background(), CallTimeout, func() error {
		_, err := cl.Connect(params)
		if err != nil && !IsRetryable(err) {
			return Permanent(err)
		}
		return err
	})
	if err != nil {
		t.Fatalf("clustertest: map/connect on %s: %s", pc.procs[i], Describe(err))
	}
	return cl
}

// Close kills every process group and waits for them; when t failed it
// logs the tail of every log.
func (pc *ProcCluster) Close() {
	for _, p := range pc.procs {
		if !p.signal(syscall.SIGKILL, ProcStopTimeout) {
			pc.t.Errorf("clustertest: %s survived SIGKILL", p)
		}
	}
	for _, f := range pc.forwards {
		_ = f.Close()
	}
	if pc.t.Failed() {
		for _, p := range pc.procs {
			pc.t.Logf("log of %s (tail):\n%s", p, tail(p.LogPath, 60))
		}
	}
}

// httpClient keeps no idle connections: their goroutines would outlive
// the test (goleak) and a killed process leaves them dangling anyway.
// It presents the operator certificate: /v1/status needs a credential.
var httpClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: OperatorTLS()}}

func httpGet(addr, path string) (int, []byte, error) { return getWith(httpClient, addr, path) }

// get reads path from addr as the system's operator.
func (pc *ProcCluster) get(addr, path string) (int, []byte, error) {
	return getWith(pc.http, addr, path)
}

func getWith(c *http.Client, addr, path string) (int, []byte, error) {
	resp, err := c.Get("https://" + addr + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.Bytes(), err
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// sigterm is the graceful stop signal (named for the benchmarks, which
// race a write against it).
const sigterm = syscall.SIGTERM
