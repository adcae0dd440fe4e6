package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// Server configuration sources, generic over the flag set so every flag
// (including ones added later) is covered the same way:
//
//   - a YAML file (--config FILE or CONCORD_CONFIG) whose keys are flag
//     names: `node-id: n1`, `join: [a:7703, b:7703]`;
//   - environment variables CONCORD_<FLAG> (upper case, dashes to
//     underscores): CONCORD_NODE_ID=n1, CONCORD_JOIN=a:7703,b:7703;
//   - flags on the command line.
//
// Flags win over the environment, which wins over the file. Hidden flags
// (deprecated or refused ones) take no value from the file or the
// environment. YAML rather than HCL: operators already write the
// Kubernetes manifests in it (the file fits a ConfigMap as is), and the
// parser is already in the module graph.

// Names of the flags that choose and show the sources themselves.
const (
	configFlag      = "config"
	printConfigFlag = "print-config"
)

// envPrefix starts every environment variable that sets a flag.
const envPrefix = "CONCORD_"

// envName is the environment variable that sets flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// configurable reports whether a flag may be set from a file or the
// environment.
func configurable(f *pflag.Flag) bool {
	return !f.Hidden && f.Name != configFlag && f.Name != printConfigFlag && f.Name != "help"
}

// source says where a flag's effective value came from.
type source string

const (
	fromDefault source = "default"
	fromFile    source = "file"
	fromEnv     source = "env"
	fromFlag    source = "flag"
)

// applySources sets every flag not given on the command line from the
// environment (lookup) or else from the config file, and returns where each
// configurable flag's value came from. The file is --config, else
// CONCORD_CONFIG; "" means none.
func applySources(fs *pflag.FlagSet, lookup func(string) (string, bool)) (map[string]source, error) {
	path, _ := fs.GetString(configFlag)
	if !fs.Changed(configFlag) {
		if v, ok := lookup(envName(configFlag)); ok {
			path = v
		}
	}
	file := map[string]string{}
	if path != "" {
		var err error
		if file, err = readConfigFile(fs, path); err != nil {
			return nil, err
		}
	}
	sources := map[string]source{}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || !configurable(f) {
			return
		}
		switch v, inEnv := lookup(envName(f.Name)); {
		case fs.Changed(f.Name):
			sources[f.Name] = fromFlag
		case inEnv:
			if serr := fs.Set(f.Name, v); serr != nil {
				err = fmt.Errorf("%s: %w", envName(f.Name), serr)
			}
			sources[f.Name] = fromEnv
		case hasKey(file, f.Name):
			if serr := fs.Set(f.Name, file[f.Name]); serr != nil {
				err = fmt.Errorf("config file %s: %s: %w", path, f.Name, serr)
			}
			sources[f.Name] = fromFile
		default:
			sources[f.Name] = fromDefault
		}
	})
	return sources, err
}

func hasKey(m map[string]string, k string) bool { _, ok := m[k]; return ok }

// envTypos returns, for each CONCORD_* variable of environ that sets
// nothing but spells a flag's variable another way (CONCORD_NODEID,
// CONCORD_NODE-ID, concord_node_id), a warning naming the one meant: such
// a variable is otherwise ignored without a word. Other CONCORD_*
// variables (the CLI's, secrets) are left alone.
func envTypos(fs *pflag.FlagSet, environ []string) []string {
	norm := func(s string) string { return strings.ToUpper(strings.NewReplacer("-", "", "_", "").Replace(s)) }
	want := map[string]string{} // normalized -> the variable
	fs.VisitAll(func(f *pflag.Flag) {
		if configurable(f) || f.Name == configFlag {
			want[norm(envName(f.Name))] = envName(f.Name)
		}
	})
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(strings.ToUpper(name), envPrefix) {
			continue
		}
		if meant, ok := want[norm(name)]; ok && meant != name {
			out = append(out, fmt.Sprintf("environment variable %s sets nothing: did you mean %s?", name, meant))
		}
	}
	sort.Strings(out)
	return out
}

// readConfigFile parses a YAML config file into flag name -> the string
// that flag's Set takes. Unknown keys, nested maps and empty values are
// errors naming the key and its line.
func readConfigFile(fs *pflag.FlagSet, path string) (map[string]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	out, err := parseConfig(fs, raw)
	if err != nil {
		return nil, fmt.Errorf("config file %s: %w", path, err)
	}
	return out, nil
}

func parseConfig(fs *pflag.FlagSet, raw []byte) (map[string]string, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return map[string]string{}, nil // an empty file sets nothing
		}
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("more than one YAML document")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: want a mapping of flag names to values", root.Line)
	}
	out := map[string]string{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		name := k.Value
		f := fs.Lookup(name)
		switch {
		case f == nil || !configurable(f):
			return nil, fmt.Errorf("line %d: unknown key %q (%s)", k.Line, name, unknownKeyHint(fs, name))
		case hasKey(out, name):
			return nil, fmt.Errorf("line %d: key %q given twice", k.Line, name)
		}
		val, err := nodeValue(v)
		if err != nil {
			return nil, fmt.Errorf("line %d: %s: %w", v.Line, name, err)
		}
		out[name] = val
	}
	return out, nil
}

// unknownKeyHint says what to write instead of an unknown config key: the
// file of a secret (secrets are never values), or the flag name the key
// spells another way (node_id, nodeId, NODE-ID for node-id).
func unknownKeyHint(fs *pflag.FlagSet, name string) string {
	if f := fs.Lookup(name + "-file"); f != nil && configurable(f) && secretName.MatchString(name) {
		return fmt.Sprintf("secrets are not accepted as values: put it in a file readable only by the server and set %s-file", name)
	}
	norm := func(s string) string { return strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(s)) }
	hint := "keys are `concord server` flag names"
	fs.VisitAll(func(f *pflag.Flag) {
		if configurable(f) && norm(f.Name) == norm(name) {
			hint = fmt.Sprintf("did you mean %q? keys are `concord server` flag names", f.Name)
		}
	})
	return hint
}

// nodeValue turns a scalar into its text and a list of scalars into the
// comma-separated (CSV-quoted) form slice flags parse.
func nodeValue(v *yaml.Node) (string, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return "", errors.New("no value (remove the key to keep the default)")
		}
		return v.Value, nil
	case yaml.SequenceNode:
		items := make([]string, 0, len(v.Content))
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return "", errors.New("a list may hold only plain values")
			}
			items = append(items, it.Value)
		}
		var b strings.Builder
		w := csv.NewWriter(&b)
		if err := w.Write(items); err != nil {
			return "", err
		}
		w.Flush()
		return strings.TrimSuffix(b.String(), "\n"), nil
	}
	return "", errors.New("want a value or a list of values")
}
