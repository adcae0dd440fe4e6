package backup_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/concordmap/concord/node/backup"
	"github.com/concordmap/concord/raftstore"
)

// Inspect counts each fixture's records by kind, and the counts match
// what restoring the fixture yields (its vN.json): every record of every
// module is told apart, none is unknown to this binary.
func TestInspect_KindsMatchFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.snap"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in testdata (%v)", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			info, err := backup.Inspect(file)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, m := range info.Modules {
				sum := 0
				for _, k := range m.Kinds {
					if k.Kind == "unknown" || k.Kind == "undecodable" {
						t.Errorf("module %s: %d records of kind %s", m.Name, k.Records, k.Kind)
					}
					kinds[m.Name+"/"+k.Kind] += k.Records
					sum += k.Records
				}
				if sum != m.Records {
					t.Errorf("module %s: kinds add up to %d of %d records", m.Name, sum, m.Records)
				}
			}
			raw, err := os.ReadFile(strings.TrimSuffix(file, ".snap") + ".json")
			if err != nil {
				t.Fatal(err)
			}
			var want struct {
				Agents   []json.RawMessage `json:"agents"`
				Scopes   []json.RawMessage `json:"scopes"`
				Sessions []string          `json:"sessions"`
				Runs     map[string]string `json:"runs"`
			}
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatal(err)
			}
			for kind, n := range map[string]int{
				"registry/agent": len(want.Agents), "registry/scope": len(want.Scopes),
				"registry/session": len(want.Sessions), "runs/run": len(want.Runs),
			} {
				if kinds[kind] != n {
					t.Errorf("%s: inspect counts %d, the restored state has %d", kind, kinds[kind], n)
				}
			}
			var out strings.Builder
			if err := backup.WriteInfo(&out, info); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), "agent ") || !strings.Contains(out.String(), "(header 1") {
				t.Errorf("inspect output lacks the kinds:\n%s", out.String())
			}
		})
	}
}

// A record this binary cannot classify (a newer module, a newer kind) is
// counted as unknown, not dropped and not an error.
func TestRecordKind_UnknownModule(t *testing.T) {
	if got := backup.RecordKindForTest("a-module-from-the-future", []byte{1, 2, 3}); got != "" {
		t.Fatalf("unknown module: %q", got)
	}
	if got := backup.RecordKindForTest("registry", []byte{0xff, 0xff, 0xff}); got != "undecodable" {
		t.Fatalf("garbage registry record: %q", got)
	}
	if got := backup.RecordKindForTest("registry", nil); got != "" {
		t.Fatalf("empty registry record (no oneof set): %q", got)
	}
}

// The labels of a crafted file reach the terminal quoted, never as escape
// sequences.
func TestWriteInfo_QuotesUnprintableLabels(t *testing.T) {
	info := backup.Info{Version: "1.0\x1b[2J", NodeID: "n\x07", Modules: []raftstore.ModuleRecords{{Name: "reg\x1b]0;x\x07", Records: 1}}}
	var out strings.Builder
	if err := backup.WriteInfo(&out, info); err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Fatalf("escape sequences printed: %q", out.String())
	}
	if !strings.Contains(out.String(), `concord "1.0\x1b[2J"`) {
		t.Fatalf("version not quoted: %q", out.String())
	}
}
