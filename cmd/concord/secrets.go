package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/pflag"
)

// Secrets never travel on the command line: argv is visible to every local
// user (ps, /proc/PID/cmdline) and to whoever reads /debug/pprof/cmdline.
// They come from a file named by a flag or from an environment variable.

// gossipKeyEnv is the environment variable holding the base64 gossip key.
const gossipKeyEnv = "CONCORD_GOSSIP_KEY"

// operatorTokenEnv is the environment variable holding the operator token
// (instead of --operator-token-file).
const operatorTokenEnv = "CONCORD_OPERATOR_TOKEN"

// metricsTokenEnv is the environment variable holding the metrics token
// (instead of --metrics-token-file).
const metricsTokenEnv = "CONCORD_METRICS_TOKEN"

// errSecretOnCommandLine is returned when a removed secret-valued flag is
// used.
var errSecretOnCommandLine = errors.New("secrets are not accepted on the command line")

// readGossipKey returns the gossip key from file (when set) or from the
// environment variable CONCORD_GOSSIP_KEY, decoded from base64; nil when
// neither is set. Giving both is an error: one of them would be silently
// ignored. The variable is unset once read: no child process needs it.
func readGossipKey(file string) ([]byte, error) {
	if _, inEnv := os.LookupEnv(gossipKeyEnv); inEnv && file != "" {
		return nil, fmt.Errorf("gossip key given twice: --gossip-key-file and %s; keep one", gossipKeyEnv)
	}
	text, err := secretFrom(file, gossipKeyEnv)
	if err != nil {
		return nil, fmt.Errorf("--gossip-key-file: %w", err)
	}
	_ = os.Unsetenv(gossipKeyEnv)
	if len(text) == 0 {
		return nil, nil
	}
	from := gossipKeyEnv
	if file != "" {
		from = "--gossip-key-file " + file
	}
	return decodeKey(string(text), from)
}

// decodeKey decodes a base64 gossip key (surrounding space ignored) of 16,
// 24 or 32 bytes; from names where it came from in errors.
func decodeKey(text, from string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil {
		return nil, fmt.Errorf("%s: not base64 (make one with concord keygen): %w", from, err)
	}
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	}
	return nil, fmt.Errorf("%s: key is %d bytes, want 16, 24 or 32 (make one with concord keygen)", from, len(key))
}

// refuseURLCredentialsOnArgv refuses a -url flag given on the command line
// with a password in it (https://user:pass@host/...): argv shows in ps and
// /debug/pprof/cmdline. The same URL is accepted from the config file or
// the environment, which are not shown.
func refuseURLCredentialsOnArgv(fs *pflag.FlagSet, sources map[string]source) error {
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil || sources[f.Name] != fromFlag || !strings.HasSuffix(f.Name, "-url") {
			return
		}
		u, perr := url.Parse(f.Value.String())
		if perr != nil || u.User == nil {
			return
		}
		if _, has := u.User.Password(); has {
			err = fmt.Errorf("--%s: %w (the URL holds a password, and argv shows in ps and /debug/pprof/cmdline): "+
				"set it in the config file or %s instead", f.Name, errSecretOnCommandLine, envName(f.Name))
		}
	})
	return err
}
