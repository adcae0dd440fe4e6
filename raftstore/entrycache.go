package raftstore

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"sync"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// Encoding each log entry once for every follower. raft's NetworkTransport
// msgpack-encodes the whole AppendEntries request per follower, so with 6
// followers the leader encodes every entry 6 times; with non-voters that
// was half of raft's send path on the leader (DESIGN.md). entryCache keeps
// the encoding of recent entries, keyed by index, and appendSender
// (appendsend.go) splices the cached bytes into each request. The bytes on
// the wire are the very bytes raft's encoder writes for the same request
// (TestAppendWire_SameBytesAsRaft), so old and new servers mix freely.

// Entry cache bounds: the most recent entryCacheSlots entries (slot =
// index modulo the count), each at most entryCacheMaxBytes encoded;
// larger ones are encoded per request, as raft does. Worst case 8 MiB,
// typically a few hundred KiB (commands are small). 2,048 entries cover
// a non-voter's paced batch and a voter's latest RPC at several thousand
// writes per second; a follower catching up from further back misses and
// costs what it did before.
const (
	entryCacheSlots    = 2048
	entryCacheMaxBytes = 4 << 10
)

// entryCache holds the msgpack encoding of recent log entries.
type entryCache struct {
	handle *codec.MsgpackHandle
	seed   maphash.Seed

	mu    sync.Mutex
	slots [entryCacheSlots]cachedEntry
}

// cachedEntry is one encoded entry and what identifies it. Index and term
// alone identify an entry in raft (no two logs hold different entries at
// the same index and term); type, time and a hash of the payload are
// checked too, so a cache hit can only ever return the bytes of the very
// same entry.
type cachedEntry struct {
	index, term uint64
	typ         raft.LogType
	appendedAt  int64  // UnixNano
	sum         uint64 // maphash of Data and Extensions
	enc         []byte // never modified once stored
}

// newEntryCache returns an empty cache encoding with raft's settings for
// entries (newTimeFormat: NetworkTransportConfig.MsgpackUseNewTimeFormat).
func newEntryCache(newTimeFormat bool) *entryCache {
	return &entryCache{handle: raftMsgpackHandle(newTimeFormat), seed: maphash.MakeSeed()}
}

// raftMsgpackHandle is the handle raft's NetworkTransport encodes with,
// plus Raw so that already-encoded entries go out as they are (Raw only
// affects values of type codec.Raw).
func raftMsgpackHandle(newTimeFormat bool) *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.TimeNotBuiltin = !newTimeFormat
	h.Raw = true
	return h
}

// encode returns the encoding of each entry, from the cache or encoded
// now (and then cached). The returned slices must not be modified.
func (c *entryCache) encode(entries []*raft.Log) ([]codec.Raw, error) {
	if entries == nil {
		return nil, nil // encodes as nil, as raft's nil slice does
	}
	out := make([]codec.Raw, len(entries))
	keys := make([]cachedEntry, len(entries))
	for i, e := range entries {
		keys[i] = c.key(e)
	}
	misses := 0
	c.mu.Lock()
	for i := range entries {
		if s := &c.slots[keys[i].index%entryCacheSlots]; s.enc != nil && s.same(&keys[i]) {
			out[i] = s.enc
		} else {
			misses++
		}
	}
	c.mu.Unlock()
	if misses == 0 {
		return out, nil
	}
	var enc *codec.Encoder
	for i, e := range entries {
		if out[i] != nil {
			continue
		}
		var b []byte
		if enc == nil {
			enc = codec.NewEncoderBytes(&b, c.handle)
		} else {
			enc.ResetBytes(&b)
		}
		if err := enc.Encode(e); err != nil {
			return nil, fmt.Errorf("encode log entry %d: %w", e.Index, err)
		}
		out[i] = b
	}
	c.mu.Lock()
	for i := range entries {
		if len(out[i]) <= entryCacheMaxBytes {
			k := keys[i]
			k.enc = out[i]
			c.slots[k.index%entryCacheSlots] = k
		}
	}
	c.mu.Unlock()
	return out, nil
}

// key returns what identifies e, without its encoding.
func (c *entryCache) key(e *raft.Log) cachedEntry {
	var h maphash.Hash
	h.SetSeed(c.seed)
	// Data's length first, so that moving bytes between Data and
	// Extensions changes the sum.
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(e.Data)))
	_, _ = h.Write(n[:])
	_, _ = h.Write(e.Data)
	_, _ = h.Write(e.Extensions)
	return cachedEntry{index: e.Index, term: e.Term, typ: e.Type, appendedAt: e.AppendedAt.UnixNano(), sum: h.Sum64()}
}

func (s *cachedEntry) same(k *cachedEntry) bool {
	return s.index == k.index && s.term == k.term && s.typ == k.typ && s.appendedAt == k.appendedAt && s.sum == k.sum
}
