//go:build linux

package wannet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// namePrefix starts every namespace this package makes; the creating
// process id follows, so a sweep can tell abandoned ones.
const namePrefix = "cwan"

// netnsDir is where `ip netns` keeps its namespace handles.
const netnsDir = "/run/netns"

// cmdTimeout bounds one `ip` command.
const cmdTimeout = 10 * time.Second

var (
	seq       atomic.Uint64
	sweepOnce sync.Once
)

// Available returns nil when this process can make namespaces and links,
// else an error naming what is missing (for t.Skip).
func Available() error {
	if runtime.GOOS != "linux" {
		return fmt.Errorf("wannet: network namespaces need Linux, not %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		return errors.New("wannet: network namespaces need root (CAP_NET_ADMIN, CAP_SYS_ADMIN)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("wannet: the ip command (iproute2) is not installed")
	}
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("wannet: /dev/net/tun: %w", err)
	}
	_ = f.Close()
	return nil
}

// Namespace is one network namespace with one address that its processes
// bind. Its methods may be called from any goroutine.
type Namespace struct {
	// Name is the `ip netns` name (for `ip netns exec`).
	Name string
	// IP is the namespace's address, reachable from linked namespaces.
	IP netip.Addr

	mu     sync.Mutex
	fd     int // open handle for setns; -1 after Close
	closed bool
}

// NewNamespace makes a namespace named after tag, brings its loopback up
// and gives it ip. It first removes namespaces left by dead test
// processes.
func NewNamespace(tag string, ip netip.Addr) (*Namespace, error) {
	sweepOnce.Do(sweep)
	name := fmt.Sprintf("%s%d-%d-%s", namePrefix, os.Getpid(), seq.Add(1), tag)
	if err := ipCmd("netns", "add", name); err != nil {
		return nil, err
	}
	n := &Namespace{Name: name, IP: ip, fd: -1}
	fd, err := unix.Open(netnsDir+"/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = ipCmd("netns", "del", name)
		return nil, fmt.Errorf("wannet: open namespace %s: %w", name, err)
	}
	n.fd = fd
	if err := n.ip("link", "set", "lo", "up"); err != nil {
		_ = n.Close()
		return nil, err
	}
	if err := n.ip("addr", "add", ip.String()+"/32", "dev", "lo"); err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

// Close deletes the namespace (its interfaces go with it). Processes
// still inside keep it alive until they exit: stop them first.
// Idempotent.
func (n *Namespace) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	if n.fd >= 0 {
		_ = unix.Close(n.fd)
		n.fd = -1
	}
	return ipCmd("netns", "del", n.Name)
}

// Command returns a command that runs name with args inside the
// namespace (`ip netns exec`, which execs in place: the process id is
// the program's own).
func (n *Namespace) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// ip runs `ip -n NAME args...`.
func (n *Namespace) ip(args ...string) error {
	return ipCmd(append([]string{"-n", n.Name}, args...)...)
}

// inside runs f on an OS thread switched into the namespace, then
// switches the thread back and hands it back to the scheduler. The thread
// must not end with the goroutine (a LockOSThread without Unlock): a child
// process that thread once forked has the parent-death signal tied to
// that thread (Pdeathsig is per thread), and would be killed with it. If
// switching back fails the thread stays locked and ends, which is safe
// for the namespace. Sockets and TUN devices f opens belong to the
// namespace for good and may be used from any goroutine.
func (n *Namespace) inside(f func() error) error {
	n.mu.Lock()
	fd := n.fd
	n.mu.Unlock()
	if fd < 0 {
		return fmt.Errorf("wannet: namespace %s is closed", n.Name)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("wannet: open own namespace: %w", err)
			return
		}
		defer unix.Close(home)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("wannet: setns %s: %w", n.Name, err)
			return
		}
		ferr := f()
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// DialContext dials addr (an IP:port literal) from inside the namespace.
func (n *Namespace) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := n.inside(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("wannet: dial %s in %s: %w", addr, n.Name, err)
	}
	return c, nil
}

// Listen listens on addr inside the namespace.
func (n *Namespace) Listen(network, addr string) (net.Listener, error) {
	var ln net.Listener
	err := n.inside(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("wannet: listen %s in %s: %w", addr, n.Name, err)
	}
	return ln, nil
}

// ipCmd runs the ip command with args, bounded by cmdTimeout.
func ipCmd(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("wannet: ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// sweep deletes namespaces this package made in processes that no longer
// run (a test binary killed before its cleanups).
func sweep() {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), namePrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = ipCmd("netns", "del", e.Name())
		}
	}
}
