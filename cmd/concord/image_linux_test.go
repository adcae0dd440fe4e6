package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestImage checks the image `make image` built, as `make image-check`
// asks (CONCORD_IMAGE names it; without it the test skips): its config is
// the Containerfile's (the HEALTHCHECK survived the image format), it
// holds only the static binary, passwd/group, the CA bundle and empty
// directories (no shell), and its binary, run from the image's root file
// system as uid 65532 with the image's working dir and environment,
// makes TLS material in /tmp and serves a --dev node over TLS that the
// image's own HEALTHCHECK command finds healthy and ready, then stops
// cleanly on SIGTERM. It needs root (chroot,
// setuid, mounting the image) and buildah.
func TestImage(t *testing.T) {
	image := os.Getenv("CONCORD_IMAGE")
	if image == "" {
		t.Skip("CONCORD_IMAGE is not set: `make image-check` builds the image and runs this test")
	}
	if os.Geteuid() != 0 {
		t.Fatal("the image check mounts the image and runs its binary as uid 65532 from its root file system: run it as root")
	}
	cfg := inspectImage(t, image)
	rootfs := mountImage(t, image)
	checkImageConfig(t, cfg)
	checkImageFiles(t, rootfs)
	runImage(t, rootfs, cfg)
}

// imageConfig is the part of the docker image config checked here (the
// docker format, which keeps the health check; see build.sh).
type imageConfig struct {
	User         string
	ExposedPorts map[string]struct{}
	Env          []string
	Entrypoint   []string
	Cmd          []string
	WorkingDir   string
	Volumes      map[string]struct{}
	Labels       map[string]string
	Healthcheck  *struct {
		Test                           []string
		Interval, Timeout, StartPeriod time.Duration
		Retries                        int
	}
}

const (
	imageUID    = 65532
	imageBinary = "/usr/local/bin/concord"
)

// buildah runs buildah with args and returns its standard output.
func buildah(t *testing.T, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "buildah", args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

func inspectImage(t *testing.T, image string) imageConfig {
	t.Helper()
	var doc struct {
		Docker struct {
			Config imageConfig `json:"config"`
		}
	}
	if err := json.Unmarshal(buildah(t, "inspect", "--type", "image", image), &doc); err != nil {
		t.Fatalf("decode buildah inspect of %s: %v", image, err)
	}
	return doc.Docker.Config
}

// mountImage creates a working container from image and returns its root
// file system; cleanup removes the container (and whatever the node wrote).
func mountImage(t *testing.T, image string) string {
	t.Helper()
	name := fmt.Sprintf("concord-image-check-%d", os.Getpid())
	buildah(t, "from", "--pull=never", "--quiet", "--name", name, image)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "buildah", "rm", name).CombinedOutput(); err != nil {
			t.Errorf("buildah rm %s: %v\n%s", name, err, out)
		}
	})
	return strings.TrimSpace(string(buildah(t, "mount", name)))
}

// checkImageConfig compares the image's config with the Containerfile's
// runtime instructions, and the user with passwd's concord entry.
func checkImageConfig(t *testing.T, cfg imageConfig) {
	t.Helper()
	byCmd := map[string]instruction{}
	for _, in := range parseContainerfile(t, filepath.Join(deployDir, "container", "Containerfile")) {
		byCmd[in.cmd] = in
	}
	if want := fmt.Sprintf("%d:%d", imageUID, imageUID); cfg.User != want || byCmd["USER"].args != want {
		t.Errorf("image user %q, Containerfile USER %q, want %s", cfg.User, byCmd["USER"].args, want)
	}
	if want := execForm(t, byCmd["ENTRYPOINT"]); !slices.Equal(cfg.Entrypoint, want) || !slices.Equal(want, []string{imageBinary}) {
		t.Errorf("image entrypoint %v, Containerfile %v, want [%s]", cfg.Entrypoint, want, imageBinary)
	}
	if want := execForm(t, byCmd["CMD"]); !slices.Equal(cfg.Cmd, want) {
		t.Errorf("image cmd %v, Containerfile %v", cfg.Cmd, want)
	}
	exposed := slices.Sorted(maps.Keys(cfg.ExposedPorts))
	want := strings.Fields(byCmd["EXPOSE"].args)
	slices.Sort(want)
	if !slices.Equal(exposed, want) {
		t.Errorf("image exposes %v, Containerfile %v", exposed, want)
	}
	if _, ok := cfg.Volumes["/var/lib/concord"]; !ok || cfg.WorkingDir != "/var/lib/concord" {
		t.Errorf("image volumes %v, working dir %q: want /var/lib/concord for both", cfg.Volumes, cfg.WorkingDir)
	}
	hc := cfg.Healthcheck
	_, argv, _ := strings.Cut(byCmd["HEALTHCHECK"].args, "CMD ")
	wantTest := append([]string{"CMD"}, execForm(t, instruction{cmd: "HEALTHCHECK", args: argv})...)
	if hc == nil || !slices.Equal(hc.Test, wantTest) || hc.Interval <= 0 || hc.Timeout <= 0 || hc.Retries <= 0 {
		t.Fatalf("image health check %+v, want %v with interval, timeout and retries (built in the docker format?)", hc, wantTest)
	}
}

// checkImageFiles walks the image's root file system: only the expected
// regular files (so no shell, no libc), the data dir owned by the server's
// user, a sticky /tmp, a static binary built as make image builds it, a
// CA bundle, and passwd/group entries for the user.
func checkImageFiles(t *testing.T, rootfs string) {
	t.Helper()
	want := []string{"etc/group", "etc/passwd", "etc/ssl/certs/ca-certificates.crt", "usr/local/bin/concord"}
	var files []string
	err := filepath.WalkDir(rootfs, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(rootfs, path)
		if !d.Type().IsRegular() {
			t.Errorf("/%s is a %s, want only regular files and directories", rel, d.Type())
		}
		files = append(files, rel)
		return nil
	})
	if err != nil {
		t.Fatalf("walk the image: %v", err)
	}
	if slices.Sort(files); !slices.Equal(files, want) {
		t.Errorf("image files %v, want exactly %v (no shell, no libc)", files, want)
	}
	for _, d := range []struct {
		path      string
		uid, mode uint32
	}{
		{"var/lib/concord", imageUID, 0o750},
		{"tmp", 0, 0o777 | uint32(os.ModeSticky)},
		{"etc", 0, 0o755},
	} {
		fi, err := os.Stat(filepath.Join(rootfs, d.path))
		if err != nil {
			t.Errorf("image: %v", err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		mode := uint32(fi.Mode().Perm()) | uint32(fi.Mode()&os.ModeSticky)
		if !fi.IsDir() || st.Uid != d.uid || st.Gid != d.uid || mode != d.mode {
			t.Errorf("/%s: dir %v, owner %d:%d, mode %v; want a dir owned by %d:%d, mode %v",
				d.path, fi.IsDir(), st.Uid, st.Gid, fi.Mode(), d.uid, d.uid, os.FileMode(d.mode))
		}
	}
	checkStaticBinary(t, filepath.Join(rootfs, imageBinary))
	pem, err := os.ReadFile(filepath.Join(rootfs, "etc/ssl/certs/ca-certificates.crt"))
	if err != nil || !x509.NewCertPool().AppendCertsFromPEM(pem) {
		t.Errorf("image CA bundle: no PEM certificate (%v)", err)
	}
	for file, entry := range map[string]string{
		"etc/passwd": fmt.Sprintf("concord:x:%d:%d:", imageUID, imageUID),
		"etc/group":  fmt.Sprintf("concord:x:%d:", imageUID),
	} {
		b, err := os.ReadFile(filepath.Join(rootfs, file))
		if err != nil || !strings.Contains(string(b), "\n"+entry) {
			t.Errorf("image /%s lacks %q (%v):\n%s", file, entry, err, b)
		}
	}
}

// checkStaticBinary fails unless path is an executable ELF with no
// interpreter and no shared libraries, built with cgo off and -trimpath
// (which keeps -ldflags out of the build info: runImage checks the
// version the ldflags set).
func checkStaticBinary(t *testing.T, path string) {
	t.Helper()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("image binary %s: %v (mode %v)", path, err, fi)
	}
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("image binary: %v", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("image binary has a %v program header: not static", p.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("image binary needs shared libraries %v (%v)", libs, err)
	}
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatalf("image binary build info: %v", err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["CGO_ENABLED"] != "0" || settings["-trimpath"] != "true" {
		t.Errorf("image binary built with CGO_ENABLED=%q -trimpath=%q; want 0 and true", settings["CGO_ENABLED"], settings["-trimpath"])
	}
}

// runImage runs the image's binary from its root file system as the
// image's user, in its working dir with its environment, as a --dev node
// with TLS material it made itself, on free loopback ports, with the
// image's data dir; the image's own HEALTHCHECK command (pointed at that
// port) and its --ready form must pass, and SIGTERM must stop the node
// with status 0.
func runImage(t *testing.T, rootfs string, cfg imageConfig) {
	t.Helper()
	ports := freeLoopbackPorts(t, 4)
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	args := append(slices.Clone(cfg.Entrypoint[1:]), "server", "--dev", "--data-dir", "/var/lib/concord",
		"--http-addr", addr(0), "--grpc-addr", addr(1), "--raft-addr", addr(2), "--gossip-addr", addr(3))
	version, err := inImage(context.Background(), rootfs, cfg, cfg.Entrypoint[0], "version").CombinedOutput()
	if want := cfg.Labels["org.opencontainers.image.version"]; err != nil || want == "" || !strings.Contains(string(version), " "+want+" ") {
		t.Errorf("concord version in the image: %q (%v), want the image's version label %q", version, err, want)
	}
	// TLS material made by the image's binary, as its user, in its /tmp:
	// the node serves HTTPS as a production node does, which is what the
	// HEALTHCHECK probes.
	for _, tls := range [][]string{
		{"tls", "ca", "create", "--system-id", "dev", "--dir", "/tmp"},
		{"tls", "cert", "create", "--server", "--system-id", "dev", "--node-id", "dev-1", "--dir", "/tmp"},
	} {
		if b, err := inImage(context.Background(), rootfs, cfg, cfg.Entrypoint[0], tls...).CombinedOutput(); err != nil {
			t.Fatalf("concord %s in the image: %v\n%s", strings.Join(tls, " "), err, b)
		}
	}
	args = append(args, "--node-id", "dev-1", "--system-id", "dev", "--tls-ca-file", "/tmp/dev-ca.pem",
		"--tls-cert-file", "/tmp/dev-server-dev-1.pem", "--tls-key-file", "/tmp/dev-server-dev-1-key.pem")
	var out bytes.Buffer
	srv := inImage(context.Background(), rootfs, cfg, cfg.Entrypoint[0], args...)
	srv.Stdout, srv.Stderr = &out, &out
	if err := srv.Start(); err != nil {
		t.Fatalf("start the image's server: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- srv.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = srv.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("server output:\n%s", out.String())
		}
	}()

	// The HEALTHCHECK as the image has it, but for the node's port.
	health := slices.Clone(cfg.Healthcheck.Test[1:])
	k := slices.Index(health, "--url")
	if k < 0 || k+1 >= len(health) {
		t.Fatalf("HEALTHCHECK %v has no --url", health)
	}
	u, err := url.Parse(health[k+1])
	if err != nil || u.Scheme != "https" {
		t.Fatalf("HEALTHCHECK --url %q: want https:// (%v)", health[k+1], err)
	}
	u.Host = addr(0)
	health[k+1] = u.String()
	for _, probe := range [][]string{health, append(slices.Clone(health), "--ready")} {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			b, err := inImage(ctx, rootfs, cfg, probe[0], probe[1:]...).CombinedOutput()
			cancel()
			if err == nil {
				break
			}
			select {
			case err := <-exited:
				stopped = true
				t.Fatalf("the image's server exited: %v", err)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v in the image: %v\n%s", probe, err, b)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := srv.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("the image's server exited with %v after SIGTERM", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the image's server did not stop within 30s of SIGTERM")
	}
	// The node wrote its data as the image's user.
	entries, err := os.ReadDir(filepath.Join(rootfs, "var/lib/concord"))
	if err != nil || len(entries) == 0 {
		t.Fatalf("the node wrote nothing to /var/lib/concord (%v)", err)
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err == nil && fi.Sys().(*syscall.Stat_t).Uid != imageUID {
			t.Errorf("/var/lib/concord/%s is owned by uid %d, want %d", e.Name(), fi.Sys().(*syscall.Stat_t).Uid, imageUID)
		}
	}
}

// inImage prepares a command run as a container runtime would run it:
// chrooted into rootfs, as the image's user with no supplementary groups,
// in its working dir, with only its environment.
func inImage(ctx context.Context, rootfs string, cfg imageConfig, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = cfg.WorkingDir
	cmd.Env = slices.Clone(cfg.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Chroot:     rootfs,
		Credential: &syscall.Credential{Uid: imageUID, Gid: imageUID, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	return cmd
}

// freeLoopbackPorts returns n distinct ports free on 127.0.0.1 for both
// TCP and UDP (gossip uses both) when asked.
func freeLoopbackPorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for len(ports) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		_ = ln.Close()
		if err != nil {
			continue
		}
		_ = pc.Close()
		if !slices.Contains(ports, port) {
			ports = append(ports, port)
		}
	}
	return ports
}
