package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/concordmap/concord/node"
)

// concord server --print-config: the effective settings as a config file,
// each value's source, secrets redacted, and whether a start would accept
// them.

// secretName matches flags whose value is a secret. A flag naming a file
// (…-file) holds a path, which is shown; the file's contents never are.
var secretName = regexp.MustCompile(`key|token|secret|password`)

// override is a value in effect that the flag does not hold (--dev's own
// settings), with why.
type override struct{ value, note string }

// printConfig writes the effective configuration as a config file (YAML,
// keys = flag names), each line commented with its source, secrets
// redacted. overrides replace the flags' values (source "dev").
func printConfig(w io.Writer, fs *pflag.FlagSet, sources map[string]source, overrides map[string]override) error {
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if configurable(f) {
			names = append(names, f.Name)
		}
	})
	sort.Strings(names)
	for _, name := range names {
		f := fs.Lookup(name)
		val := flagValue(f)
		if secretName.MatchString(name) && !strings.HasSuffix(name, "-file") && val != `""` && val != "[]" {
			val = `"<redacted>"`
		} else if strings.HasSuffix(name, "-url") {
			val = redactURLValue(f.Value.String(), val)
		}
		src := string(sources[name])
		if o, ok := overrides[name]; ok {
			val, src = o.value, "dev"
			if o.note != "" {
				src += ": " + o.note
			}
		}
		if _, err := fmt.Fprintf(w, "%s: %s  # %s\n", name, val, src); err != nil {
			return err
		}
	}
	return nil
}

// secretEnvs are the environment variables that carry a secret's value
// (no flag or file key does), as print-config names them.
var secretEnvs = []struct{ env, what string }{
	{gossipKeyEnv, "gossip key"},
	{operatorTokenEnv, "operator token"},
	{metricsTokenEnv, "metrics token"},
}

// redactURLValue returns the printed value of a URL setting without what
// may be a secret: user info (https://user:pass@...) and the query (some
// issuers take an API key there). printed is returned when neither is set.
func redactURLValue(raw, printed string) string {
	u, err := url.Parse(raw)
	if err != nil {
		if raw == "" {
			return printed
		}
		return `"<redacted: not a URL>"`
	}
	if u.User == nil && u.RawQuery == "" && u.Fragment == "" {
		return printed
	}
	r := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	if u.User != nil {
		r.User = url.User("redacted")
	}
	if u.RawQuery != "" {
		r.RawQuery = "redacted"
	}
	return strconv.Quote(r.String())
}

// printSecretEnv notes, as comments (no flag or file key sets them), the
// secrets that come from the environment, redacted: without it an
// effective config whose gossip key is CONCORD_GOSSIP_KEY would not say so.
func printSecretEnv(w io.Writer, lookup func(string) (string, bool)) error {
	for _, s := range secretEnvs {
		if _, ok := lookup(s.env); ok {
			if _, err := fmt.Fprintf(w, "# %s: \"<redacted>\"  # env %s\n", s.what, s.env); err != nil {
				return err
			}
		}
	}
	return nil
}

// flagValue renders a flag's value as YAML (flow style for lists).
func flagValue(f *pflag.Flag) string {
	str := func(v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v} }
	var n *yaml.Node
	switch v := f.Value.(type) {
	case pflag.SliceValue:
		n = &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, it := range v.GetSlice() {
			n.Content = append(n.Content, str(it))
		}
	default:
		switch f.Value.Type() {
		case "bool", "int", "int64", "uint", "uint64", "float64":
			return f.Value.String()
		}
		n = str(f.Value.String())
	}
	b, err := yaml.Marshal(n)
	if err != nil {
		return fmt.Sprintf("%q", f.Value.String())
	}
	return strings.TrimSpace(string(b))
}

// devSettings is what --dev makes of the settings config() overrides for
// it, for --print-config: flag name -> the value in effect (YAML) and why.
// Without it print-config showed a dev node listening on 0.0.0.0 with no
// anonymous access, which is not what runs.
func (f serverFlags) devSettings() map[string]override {
	out := map[string]override{}
	dev := node.DevConfig("")
	set := func(name, val, note string) {
		if !f.changed(name) {
			out[name] = override{value: val, note: note}
		}
	}
	for name, addr := range devAddrs {
		set(name, addr, "")
	}
	set("node-id", dev.NodeID, "")
	set("system-id", dev.SystemID, "")
	set("data-dir", `""`, "a temporary directory, removed at exit")
	set("allow-anonymous", "["+strings.Join(dev.ACL.AnonymousTypes, ", ")+"]", "")
	set("raft-multiplier", fmt.Sprint(f.raftMultiplier), "not applied: quick single-node timings")
	out["bootstrap"] = override{value: fmt.Sprint(f.bootstrap || f.bootstrapExpect == 0), note: "unless --bootstrap-expect"}
	out["http-open-reads"] = override{value: "true", note: "always with --dev"}
	out["insecure"] = override{value: fmt.Sprint(!f.tls.hasMaterial()), note: "without TLS material"}
	return out
}

// errSettingsInvalid is what --print-config returns, after printing, for
// settings a start would refuse: a non-zero exit, so a script or a CI step
// (`concord server --config f --print-config >/dev/null`) can validate a
// config the way `consul validate` does.
var errSettingsInvalid = errors.New("settings not valid")

// printValidity ends --print-config with whether a server would start
// with these settings as far as they can be checked without starting it
// (flag values and their combinations, the gossip key and role files): a
// comment, so the output stays a config file. Invalid settings also return
// an error wrapping errSettingsInvalid with the reason (exit status 1, the
// reason on stderr too); the settings have been printed either way.
func printValidity(w io.Writer, f serverFlags) error {
	_, cleanup, err := f.config()
	cleanup()
	line := "# valid as far as checked without starting (addresses, TLS files and peers are checked at start)"
	if err != nil {
		line = "# not valid: " + strings.ReplaceAll(err.Error(), "\n", " ")
	}
	if _, werr := fmt.Fprintln(w, line); werr != nil {
		return werr
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errSettingsInvalid, err)
	}
	return nil
}
