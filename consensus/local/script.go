package local

import (
	"os"

	"github.com/concordmap/concord/consensus"
)

// LoadScriptFile reads an answers file (see consensus.Script). Its errors
// are os.Open's or consensus.LoadScript's, unwrapped, so a CLI can prefix
// the flag that named the file.
func LoadScriptFile(path string) (*consensus.Script, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return consensus.LoadScript(f)
}
