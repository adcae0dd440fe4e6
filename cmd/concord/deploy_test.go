package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// The deploy/ files are checked here, where `concord server`'s flags are
// known: every Kubernetes manifest decodes strictly (unknown or misspelt
// fields fail) into the Kubernetes API types, the StatefulSet has what the
// operating docs promise, and every flag or config key that the manifests,
// the systemd unit, the container file and the example config pass exists
// on `concord server`. Validation uses the Go API types rather than
// kubeconform: its JSON schemas cannot be fetched offline.

const deployDir = "../../deploy"

// serverFlagSet returns `concord server`'s flags.
func serverFlagSet(*testing.T) *pflag.FlagSet { return newServerCmd().Flags() }

// imageUser is the container image's USER (uid:gid).
func imageUser(t *testing.T) string {
	t.Helper()
	user := ""
	for _, in := range parseContainerfile(t, filepath.Join(deployDir, "container", "Containerfile")) {
		if in.cmd == "USER" {
			user = in.args
		}
	}
	return user
}

func ptrOr(p *int64) int64 {
	if p == nil {
		return -1
	}
	return *p
}

// manifest is one YAML document of deploy/kubernetes.
type manifest struct {
	file       string
	apiVersion string
	kind       string
	name       string
	obj        any
}

// kustomization is the part of kustomize's Kustomization used here; strict
// decoding refuses any other field, so extend it when one is needed.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace,omitempty"`
	Resources  []string `json:"resources"`
}

// newObject returns the typed value a document of this apiVersion/kind
// decodes into.
func newObject(apiVersion, kind string) (any, error) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, nil
	case "v1/Service":
		return &corev1.Service{}, nil
	case "v1/Secret":
		return &corev1.Secret{}, nil
	case "v1/Namespace":
		return &corev1.Namespace{}, nil
	case "apps/v1/StatefulSet":
		return &appsv1.StatefulSet{}, nil
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, nil
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, nil
	case "kustomize.config.k8s.io/v1beta1/Kustomization":
		return &kustomization{}, nil
	}
	return nil, fmt.Errorf("unknown apiVersion/kind %s/%s: add its Go type to newObject", apiVersion, kind)
}

// loadManifests decodes every YAML document under deploy/kubernetes.
func loadManifests(t *testing.T) []manifest {
	t.Helper()
	var out []manifest
	err := filepath.WalkDir(filepath.Join(deployDir, "kubernetes"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		docs, err := splitYAML(path)
		if err != nil {
			return err
		}
		for _, doc := range docs {
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Metadata   struct {
					Name string `json:"name"`
				} `json:"metadata"`
			}
			if err := sigsyaml.Unmarshal(doc, &head); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			obj, err := newObject(head.APIVersion, head.Kind)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if err := sigsyaml.UnmarshalStrict(doc, obj); err != nil {
				return fmt.Errorf("%s: %s %q: %w", path, head.Kind, head.Metadata.Name, err)
			}
			out = append(out, manifest{file: path, apiVersion: head.APIVersion, kind: head.Kind, name: head.Metadata.Name, obj: obj})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// splitYAML returns the non-empty documents of a multi-document file.
func splitYAML(path string) ([][]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var docs [][]byte
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			return docs, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		b, err := yaml.Marshal(&n)
		if err != nil {
			return nil, err
		}
		docs = append(docs, b)
	}
}

func find[T any](t *testing.T, ms []manifest, kind, name string) T {
	t.Helper()
	for _, m := range ms {
		if m.kind == kind && m.name == name {
			return m.obj.(T)
		}
	}
	t.Fatalf("no %s %q in deploy/kubernetes", kind, name)
	var zero T
	return zero
}

// flagArg matches a flag in an argument: --name or --name=value.
var flagArg = regexp.MustCompile(`^--([a-z0-9][a-z0-9-]*)(=|$)`)

// checkFlags fails for every --flag in args that fs does not define or
// hides (a removed flag kept only to refuse it, such as --gossip-key).
func checkFlags(t *testing.T, where string, fs *pflag.FlagSet, args []string) {
	t.Helper()
	for _, a := range args {
		m := flagArg.FindStringSubmatch(a)
		if m == nil {
			continue
		}
		switch f := fs.Lookup(m[1]); {
		case f == nil:
			t.Errorf("%s passes --%s, which the command does not have", where, m[1])
		case f.Hidden:
			t.Errorf("%s passes --%s, which is removed (hidden, refused)", where, m[1])
		}
	}
}

func TestDeploy_KubernetesManifests(t *testing.T) {
	ms := loadManifests(t)
	fs := serverFlagSet(t)

	sts := find[*appsv1.StatefulSet](t, ms, "StatefulSet", "concord")
	spec := sts.Spec
	pod := spec.Template.Spec
	if spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Error("StatefulSet: podManagementPolicy must be Parallel (bootstrap-expect needs every pod started)")
	}
	if a := pod.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 {
		t.Error("StatefulSet: no required pod anti-affinity")
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("StatefulSet: runAsNonRoot is not set")
	} else if ids := fmt.Sprintf("%d:%d", ptrOr(sc.RunAsUser), ptrOr(sc.RunAsGroup)); ids != imageUser(t) || ptrOr(sc.FSGroup) != ptrOr(sc.RunAsGroup) {
		t.Errorf("StatefulSet: runs as %s with fsGroup %d, want the image's USER %s owning the data volume", ids, ptrOr(sc.FSGroup), imageUser(t))
	}
	if len(spec.VolumeClaimTemplates) == 0 {
		t.Error("StatefulSet: no data volume claim template")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("StatefulSet: %d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "server" {
		t.Fatalf("StatefulSet: container args %v do not run `concord server`", c.Args)
	}
	checkFlags(t, "statefulset.yaml", fs, c.Args[1:])
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/v1/ready" {
		t.Error("StatefulSet: readiness probe is not GET /v1/ready")
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/v1/health" {
		t.Error("StatefulSet: liveness probe is not GET /v1/health")
	}
	ports := map[string]bool{}
	for _, p := range c.Ports {
		ports[p.Name] = true
	}
	mounted := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		mounted[vm.Name] = true
	}
	secrets := map[string]bool{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secrets[v.Secret.SecretName] = mounted[v.Name]
		}
	}
	for _, s := range []string{"concord-tls", "concord-gossip", "concord-metrics"} {
		if !secrets[s] {
			t.Errorf("StatefulSet: Secret %s is not mounted as files", s)
		}
	}
	for _, e := range c.Env {
		if secretName.MatchString(strings.ToLower(e.Name)) {
			t.Errorf("StatefulSet: env %s passes a secret as a value; mount it as a file", e.Name)
		}
	}

	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("StatefulSet: enableServiceLinks must be false (Kubernetes would set CONCORD_* variables for the concord Services)")
	}
	checkServiceLinkVars(t, fs, ms)

	peers := find[*corev1.Service](t, ms, "Service", spec.ServiceName)
	if peers.Spec.ClusterIP != corev1.ClusterIPNone || !peers.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: want headless with publishNotReadyAddresses", spec.ServiceName)
	}
	client := find[*corev1.Service](t, ms, "Service", "concord")
	for _, svc := range []*corev1.Service{peers, client} {
		for _, p := range svc.Spec.Ports {
			if !ports[p.TargetPort.StrVal] {
				t.Errorf("Service %s: targetPort %q is not a container port", svc.Name, p.TargetPort.StrVal)
			}
		}
	}
	pdb := find[*policyv1.PodDisruptionBudget](t, ms, "PodDisruptionBudget", "concord")
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if spec.Template.Labels[k] != v {
			t.Errorf("PodDisruptionBudget selects %s=%s, which the pods do not carry", k, v)
		}
	}
	sm := find[*monitoringv1.ServiceMonitor](t, ms, "ServiceMonitor", "concord")
	for _, ep := range sm.Spec.Endpoints {
		if !slices.ContainsFunc(client.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) || ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor endpoint %s%s is not the client Service's /metrics", ep.Port, ep.Path)
		}
	}

	// Each selector selects what it must (the API server refuses a
	// StatefulSet whose selector misses its pods; a Service or a
	// ServiceMonitor that selects nothing fails silently).
	if !selects(spec.Selector.MatchLabels, spec.Template.Labels) {
		t.Errorf("StatefulSet: selector %v does not select its pods %v", spec.Selector.MatchLabels, spec.Template.Labels)
	}
	for _, svc := range []*corev1.Service{peers, client} {
		if !selects(svc.Spec.Selector, spec.Template.Labels) {
			t.Errorf("Service %s: selector %v does not select the pods %v", svc.Name, svc.Spec.Selector, spec.Template.Labels)
		}
	}
	if !selects(sm.Spec.Selector.MatchLabels, client.Labels) {
		t.Errorf("ServiceMonitor: selector %v does not select the client Service %v", sm.Spec.Selector.MatchLabels, client.Labels)
	}

	cm := find[*corev1.ConfigMap](t, ms, "ConfigMap", "concord-config")
	fromFile, err := parseConfig(fs, []byte(cm.Data["concord.yaml"]))
	if err != nil {
		t.Errorf("configmap.yaml concord.yaml: %v", err)
	}
	// /metrics needs a credential unless reads are open: the scraper
	// presents the metrics token the servers read.
	if fromFile["http-open-reads"] != "true" {
		if fromFile["metrics-token-file"] == "" {
			t.Error("configmap.yaml: no metrics-token-file, so Prometheus has no credential for /metrics")
		}
		for _, ep := range sm.Spec.Endpoints {
			a := ep.Authorization
			if a == nil || a.Credentials == nil || !strings.EqualFold(a.Type, "bearer") || !secrets[a.Credentials.Name] {
				t.Errorf("ServiceMonitor endpoint %s: no bearer credential from a Secret the servers mount; /metrics answers 401", ep.Port)
			}
		}
	}
	checkPathsMounted(t, pod, c, fromFile, cm)
	checkKustomizations(t, ms)
}

// checkServiceLinkVars fails when a variable Kubernetes sets for a Service
// of these manifests (when service links are on, its default) would set a
// server flag through CONCORD_<FLAG>.
func checkServiceLinkVars(t *testing.T, fs *pflag.FlagSet, ms []manifest) {
	t.Helper()
	flagEnv := map[string]string{}
	fs.VisitAll(func(f *pflag.Flag) { flagEnv[envName(f.Name)] = f.Name })
	for _, m := range ms {
		svc, ok := m.obj.(*corev1.Service)
		if !ok {
			continue
		}
		for _, v := range serviceLinkVars(svc) {
			if flag, ok := flagEnv[v]; ok {
				t.Errorf("Service %s: Kubernetes sets %s for it, which sets --%s", svc.Name, v, flag)
			}
		}
	}
}

// serviceLinkVars lists the variables Kubernetes sets in pods for svc.
func serviceLinkVars(svc *corev1.Service) []string {
	p := strings.ToUpper(strings.ReplaceAll(svc.Name, "-", "_"))
	vars := []string{p + "_SERVICE_HOST", p + "_SERVICE_PORT", p + "_PORT"}
	for _, port := range svc.Spec.Ports {
		if port.Name != "" {
			vars = append(vars, p+"_SERVICE_PORT_"+strings.ToUpper(strings.ReplaceAll(port.Name, "-", "_")))
		}
		base := fmt.Sprintf("%s_PORT_%d_%s", p, port.Port, port.Protocol)
		vars = append(vars, base, base+"_PROTO", base+"_PORT", base+"_ADDR")
	}
	return vars
}

func TestDeploy_ServiceLinkVars(t *testing.T) {
	svc := &corev1.Service{}
	svc.Name = "concord"
	svc.Spec.Ports = []corev1.ServicePort{{Name: "map", Port: 7700, Protocol: corev1.ProtocolTCP}}
	got := serviceLinkVars(svc)
	for _, want := range []string{"CONCORD_SERVICE_HOST", "CONCORD_SERVICE_PORT_MAP", "CONCORD_PORT", "CONCORD_PORT_7700_TCP_ADDR"} {
		if !slices.Contains(got, want) {
			t.Errorf("serviceLinkVars lacks %s: %v", want, got)
		}
	}
	// A flag named --service-host would be set by CONCORD_SERVICE_HOST.
	if !slices.Contains(got, envName("service-host")) {
		t.Errorf("serviceLinkVars does not name the variable of a --service-host flag: %v", got)
	}
}

// selects reports whether a non-empty label selector matches labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return len(selector) > 0
}

// checkPathsMounted requires every file or directory the server is told
// to use (the arguments' and the config file's --config, --data-dir and
// --...-file values) to lie on one of the container's volume mounts (the
// root file system is read-only and holds none of them), and the config
// file to be a key of the ConfigMap mounted there.
func checkPathsMounted(t *testing.T, pod corev1.PodSpec, c corev1.Container, fromFile map[string]string, cm *corev1.ConfigMap) {
	t.Helper()
	paths := map[string]string{}
	for _, arg := range c.Args[1:] {
		if name, val, ok := strings.Cut(strings.TrimPrefix(arg, "--"), "="); ok {
			paths[name] = val
		}
	}
	for name, val := range fromFile {
		if _, set := paths[name]; !set {
			paths[name] = val
		}
	}
	for name, path := range paths {
		if name != "config" && name != "data-dir" && !strings.HasSuffix(name, "-file") || path == "" {
			continue
		}
		k := slices.IndexFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
			return path == vm.MountPath || strings.HasPrefix(path, vm.MountPath+"/")
		})
		if k < 0 {
			t.Errorf("StatefulSet: --%s %s is on no volume mount", name, path)
			continue
		}
		if name != "config" {
			continue
		}
		vol := c.VolumeMounts[k].Name
		v := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == vol })
		if v < 0 || pod.Volumes[v].ConfigMap == nil || pod.Volumes[v].ConfigMap.Name != cm.Name || cm.Data[filepath.Base(path)] == "" {
			t.Errorf("StatefulSet: --config %s is not the %s ConfigMap's key", path, cm.Name)
		}
	}
}

// checkKustomizations requires every resource a kustomization lists to
// exist and to be one kustomize loads: a file inside the kustomization's
// directory, or a directory (a base) that does not contain it (kustomize
// refuses that as a cycle: the examples once pointed at deploy/kubernetes
// itself and `kubectl apply -k` failed). The base lists every manifest of
// its directory, and deploy/kubernetes uses the base.
func checkKustomizations(t *testing.T, ms []manifest) {
	t.Helper()
	base := filepath.Join(deployDir, "kubernetes", "base")
	for _, m := range ms {
		k, ok := m.obj.(*kustomization)
		if !ok {
			continue
		}
		dir := filepath.Dir(m.file)
		for _, r := range k.Resources {
			for _, err := range kustomizeResourceErrs(dir, r) {
				t.Errorf("%s: resource %s: %v", m.file, r, err)
			}
		}
		if dir == filepath.Join(deployDir, "kubernetes") && !slices.Contains(k.Resources, "base") {
			t.Errorf("%s does not use the base", m.file)
		}
		if dir != base {
			continue
		}
		files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
		for _, f := range files {
			if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(k.Resources, b) {
				t.Errorf("%s does not list %s", m.file, b)
			}
		}
	}
}

// kustomizeResourceErrs says why kustomize would refuse resource r of the
// kustomization in dir (nil when it loads it).
func kustomizeResourceErrs(dir, r string) []error {
	path := filepath.Join(dir, r)
	st, err := os.Stat(path)
	if err != nil {
		return []error{err}
	}
	absDir, err1 := filepath.Abs(dir)
	absPath, err2 := filepath.Abs(path)
	if err := errors.Join(err1, err2); err != nil {
		return []error{err}
	}
	inside := func(parent, child string) bool {
		rel, err := filepath.Rel(parent, child)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
	}
	switch {
	case !st.IsDir() && !inside(absDir, absPath):
		return []error{errors.New("a file outside the kustomization's directory (kustomize loads files only under its root)")}
	case st.IsDir() && inside(absPath, absDir):
		return []error{errors.New("a directory holding this kustomization: kustomize refuses it as a cycle; use a base directory")}
	case st.IsDir():
		if _, err := os.Stat(filepath.Join(path, "kustomization.yaml")); err != nil {
			return []error{fmt.Errorf("a directory without kustomization.yaml: %w", err)}
		}
	}
	return nil
}

// With kubectl on the PATH, every kustomization under deploy/kubernetes
// must also build with kustomize itself (CI images without kubectl rely on
// the rules checkKustomizations mirrors).
func TestDeploy_KustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not on PATH: kustomize builds not run (checkKustomizations checks the same rules)")
	}
	var dirs []string
	_ = filepath.WalkDir(filepath.Join(deployDir, "kubernetes"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(p))
		}
		return nil
	})
	if len(dirs) < 3 {
		t.Fatalf("kustomizations found: %v", dirs)
	}
	for _, dir := range dirs {
		out, err := exec.Command(kubectl, "kustomize", dir).CombinedOutput()
		if err != nil {
			t.Errorf("kubectl kustomize %s: %v\n%s", dir, err, out)
			continue
		}
		if !bytes.Contains(out, []byte("kind: StatefulSet")) {
			t.Errorf("kubectl kustomize %s: no StatefulSet in\n%s", dir, out)
		}
	}
}

func TestDeploy_SystemdAndExampleConfig(t *testing.T) {
	fs := serverFlagSet(t)
	unit, err := os.ReadFile(filepath.Join(deployDir, "systemd", "concord.service"))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	sc := bufio.NewScanner(bytes.NewReader(unit))
	inExec := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "ExecStart=") {
			inExec = true
		}
		if inExec {
			args = append(args, strings.Fields(strings.TrimSuffix(line, "\\"))...)
			inExec = strings.HasSuffix(line, "\\")
		}
	}
	if !slices.Contains(args, "server") {
		t.Fatalf("concord.service ExecStart does not run `concord server`: %v", args)
	}
	checkFlags(t, "concord.service", fs, args)

	raw, err := os.ReadFile(filepath.Join(deployDir, "concord.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseConfig(fs, raw); err != nil {
		t.Errorf("concord.example.yaml: %v", err)
	}
}
