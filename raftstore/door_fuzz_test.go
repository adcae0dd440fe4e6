package raftstore

import (
	"log/slog"
	"testing"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// FuzzCheckProposal holds the door's promise: whatever bytes a peer
// forwards, either checkProposal refuses them or every replica's Apply
// takes them without panicking. Never a crash, never a forked replica.
func FuzzCheckProposal(f *testing.F) {
	for _, seed := range [][]byte{
		encode(cmdKVPut, put("a=1")),
		encode(concordv1.CommandType_COMMAND_TYPE_NOOP, &concordv1.Noop{Note: "x"}),
		{0xC8, 0x0a, 0x01, 0x78},
		{0xFF, 0x12, 0x02, 0x0a, 0x00},
		{byte(cmdKVPut), 0xff},
		{},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fs, err := newFSM([]Module{newKV(), &listModule{}}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if fs.checkProposal(data) != nil {
			return
		}
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("the door let %x through, and Apply panicked: %v", data, r)
			}
		}()
		fs.Apply(cmdLog(1, data))
	})
}
