package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one child process in its own process group, so cleanup can kill
// it and anything it started.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// procs owns every child the demo starts; killAll leaves none behind.
type procs struct {
	mu   sync.Mutex
	list []*proc
	out  io.Writer
}

// start runs bin with args; each output line is copied to p.out with a
// prefix (empty prefix: dropped, the process logs to logFile instead).
func (ps *procs) start(name, prefix, logFile string, bin string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var sinks []io.Writer
	if logFile != "" {
		f, err := os.Create(logFile)
		if err != nil {
			return nil, err
		}
		sinks = append(sinks, f)
	}
	pr, pw := io.Pipe()
	if prefix != "" {
		sinks = append(sinks, pw)
	}
	w := io.MultiWriter(sinks...)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	if prefix != "" {
		go func() {
			sc := bufio.NewScanner(pr)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				fmt.Fprintf(ps.out, "%s%s\n", prefix, sc.Text())
			}
		}()
	}
	go func() {
		p.err = cmd.Wait()
		_ = pw.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// kill9 sends SIGKILL to the process group and waits for the exit.
func (p *proc) kill9() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// stop asks politely (SIGTERM), then kills after the grace period.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.kill9()
	}
}

// stopAll stops every child, newest first (agents and clients before the
// nodes they talk to).
func (ps *procs) stopAll(grace time.Duration) {
	ps.mu.Lock()
	list := append([]*proc(nil), ps.list...)
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].stop(grace)
	}
}

// freePorts returns n loopback ports free for TCP and UDP (gossip uses both).
func freePorts(n int) ([]int, error) {
	var ports []int
	var hold []io.Closer
	defer func() {
		for _, c := range hold {
			_ = c.Close()
		}
	}()
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		hold = append(hold, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		hold = append(hold, pc)
		ports = append(ports, port)
	}
	return ports, nil
}

// waitHTTP polls url until it answers 200 or ctx ends.
func waitHTTP(ctx context.Context, get func(string) (int, []byte, error), url string) error {
	for {
		if code, _, err := get(url); err == nil && code == 200 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func joinHosts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = fmt.Sprintf("127.0.0.1:%d", p)
	}
	return strings.Join(s, ",")
}
