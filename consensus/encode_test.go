package consensus

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// replay feeds inputs to s (nil for a fresh run) and returns the final state
// and the Finish effect, if any.
// fataler is the part of testing.TB and *rapid.T that replay needs.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

func replay(t fataler, s *State, inputs []Input) (*State, *Finish) {
	t.Helper()
	var fin *Finish
	for i, in := range inputs {
		var fx []Effect
		var err error
		s, fx, err = step(s, in)
		if err != nil {
			t.Fatalf("input %d (%+v): %v", i, in.Kind, err)
		}
		for _, e := range fx {
			// Copied only when found: taking f's address would move f to
			// the heap for every effect, which the Step benchmarks count.
			if f, ok := e.(Finish); ok {
				fin = new(Finish)
				*fin = f
			}
		}
	}
	return s, fin
}

func TestEncode_RoundTripAtEveryStep(t *testing.T) {
	run := runScript(t, mustRequest(t, fmt.Sprintf(workedRequest, 1)), workedExample())
	want, _ := json.Marshal(run.Result)
	for cut := 1; cut < len(run.Inputs); cut++ {
		s, _ := replay(t, nil, run.Inputs[:cut])
		enc := EncodeState(s)
		dec, err := DecodeState(enc)
		if err != nil {
			t.Fatalf("decode at %d: %v", cut, err)
		}
		if !bytes.Equal(EncodeState(dec), enc) {
			t.Fatalf("re-encoding differs at %d", cut)
		}
		_, fin := replay(t, dec, run.Inputs[cut:])
		got, _ := json.Marshal(fin.Result)
		if !bytes.Equal(got, want) {
			t.Fatalf("result after decode at %d differs", cut)
		}
	}
}

const fixtureCut = 9 // inputs applied before the v1 fixture was encoded (mid debate round 1)

// TestDecode_Version1Fixture pins the version-1 encoding: a committed state
// must keep decoding and finish with the committed result.
func TestDecode_Version1Fixture(t *testing.T) {
	statePath := filepath.Join("testdata", "state_v1.bin")
	restPath := filepath.Join("testdata", "state_v1_rest.json")
	if *update {
		run := runScript(t, mustRequest(t, fmt.Sprintf(workedRequest, 1)), workedExample())
		s, _ := replay(t, nil, run.Inputs[:fixtureCut])
		rest, _ := json.MarshalIndent(run.Inputs[fixtureCut:], "", " ")
		if err := os.WriteFile(statePath, EncodeState(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(restPath, rest, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := os.ReadFile(statePath)
	if err != nil {
		t.Fatal(err)
	}
	var rest []Input
	restRaw, err := os.ReadFile(restPath)
	if err != nil || json.Unmarshal(restRaw, &rest) != nil {
		t.Fatalf("read %s: %v", restPath, err)
	}
	s, err := DecodeState(raw)
	if err != nil {
		t.Fatalf("decode v1 fixture: %v", err)
	}
	if s.Lifecycle() != LifeRunning || s.cur == nil || s.cur.phase != PhaseDebate {
		t.Fatalf("fixture state = %v %+v", s.Lifecycle(), s.cur)
	}
	_, fin := replay(t, s, rest)
	var got bytes.Buffer
	if err := WriteResultJSON(&got, fin.Result); err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "golden", "worked_example", "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("v1 fixture finishes with a different result")
	}
}

func TestDecode_RejectsCorruptInput(t *testing.T) {
	run := runScript(t, mustRequest(t, fmt.Sprintf(workedRequest, 1)), workedExample())
	enc := EncodeState(run.State)
	cases := map[string][]byte{
		"empty":       nil,
		"bad magic":   append([]byte("XXXX"), enc[4:]...),
		"truncated":   enc[:len(enc)/2],
		"trailing":    append(append([]byte{}, enc...), 0),
		"future":      append([]byte(stateMagic), 9),
		"huge length": append([]byte(stateMagic), 1, 0xff, 0xff, 0xff, 0xff, 0x0f),
	}
	for name, b := range cases {
		if _, err := DecodeState(b); !errors.Is(err, ErrCorruptState) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
	if _, err := DecodeState(cases["future"]); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("future version: %v", err)
	}
	// Flipping any single byte never panics.
	for i := range enc {
		b := append([]byte{}, enc...)
		b[i] ^= 0x5a
		if s, err := DecodeState(b); err == nil {
			_ = s.Result()
		}
	}
}
