package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/concordmap/concord/node/access"
)

// maxRoleFileBytes bounds --role-permissions-file (a table of a few roles).
const maxRoleFileBytes = 1 << 20

// readRolePermissions loads --role-permissions-file: a YAML or JSON object
// role -> permissions (the shape of permissionOverrides), validated so a
// misspelt rule stops the server at start instead of allowing everything.
func readRolePermissions(path string) (map[string]json.RawMessage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--role-permissions-file: %w", err)
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxRoleFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("--role-permissions-file: read %s: %w", path, err)
	}
	if len(raw) > maxRoleFileBytes {
		return nil, fmt.Errorf("--role-permissions-file: %s is larger than %d bytes", path, maxRoleFileBytes)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil { // JSON is YAML too
		return nil, fmt.Errorf("--role-permissions-file: parse %s: %w", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("--role-permissions-file: %s: %w", path, err)
	}
	roles, err := access.ParseRolePermissions(js)
	if err != nil {
		return nil, fmt.Errorf("--role-permissions-file: %s: %w", path, err)
	}
	return roles, nil
}
