package raftstore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	concordv1 "github.com/concordmap/concord/proto/concord/v1"
)

// Test command types, borrowed from the real enum: the FSM only cares that
// a module claims them.
const (
	cmdKVPut    = concordv1.CommandType_COMMAND_TYPE_AGENT_REGISTER
	cmdKVDelete = concordv1.CommandType_COMMAND_TYPE_AGENT_UNREGISTER
	cmdLogAdd   = concordv1.CommandType_COMMAND_TYPE_RUN_INPUT
)

// errKeyNotFound is kvModule's domain error.
var errKeyNotFound = errors.New("kv: key not found")

// kvError is a typed domain error, to check errors.As through CommandError.
type kvError struct{ Key string }

func (e *kvError) Error() string { return "kv: bad key " + e.Key }

// kvModule is a test state module: a string map. "k=v" puts (result: the
// previous value), a key deletes (domain error when missing).
type kvModule struct {
	mu      sync.RWMutex
	m       map[string]string
	indexes []uint64          // raft index of every applied command, in order
	byIndex map[uint64]string // the "k=v" put applied at each index

	failSnapshot bool   // Snapshot returns an error
	failRestore  bool   // Restore returns an error after reading
	failPersist  bool   // Persist returns an error
	restores     int    // commit calls
	lastIndex    uint64 // last index seen by a handler
}

func newKV() *kvModule { return &kvModule{m: map[string]string{}, byIndex: map[uint64]string{}} }

func (k *kvModule) Name() string { return "kv" }

func (k *kvModule) Handlers() map[concordv1.CommandType]Handler {
	str := func() proto.Message { return &wrapperspb.StringValue{} }
	return map[concordv1.CommandType]Handler{
		cmdKVPut:    {New: str, Apply: k.applyPut},
		cmdKVDelete: {New: str, Apply: k.applyDelete},
	}
}

func (k *kvModule) applyPut(index uint64, msg proto.Message) (any, error) {
	key, val, ok := strings.Cut(msg.(*wrapperspb.StringValue).GetValue(), "=")
	if !ok || key == "" {
		return nil, &kvError{Key: key}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	prev := k.m[key]
	k.m[key] = val
	k.indexes = append(k.indexes, index)
	k.byIndex[index] = key + "=" + val
	k.lastIndex = index
	return prev, nil
}

func (k *kvModule) applyDelete(index uint64, msg proto.Message) (any, error) {
	key := msg.(*wrapperspb.StringValue).GetValue()
	k.mu.Lock()
	defer k.mu.Unlock()
	k.lastIndex = index
	if _, ok := k.m[key]; !ok {
		return nil, fmt.Errorf("delete %q: %w", key, errKeyNotFound)
	}
	delete(k.m, key)
	k.indexes = append(k.indexes, index)
	return nil, nil
}

func (k *kvModule) get(key string) (string, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	v, ok := k.m[key]
	return v, ok
}

func (k *kvModule) at(index uint64) string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return k.byIndex[index]
}

func (k *kvModule) snapshotMap() map[string]string {
	k.mu.RLock()
	defer k.mu.RUnlock()
	out := make(map[string]string, len(k.m))
	for key, v := range k.m {
		out[key] = v
	}
	return out
}

func (k *kvModule) Snapshot() (ModuleSnapshot, error) {
	if k.failSnapshot {
		return nil, errors.New("kv: snapshot refused")
	}
	return &kvSnapshot{m: k.snapshotMap(), fail: k.failPersist}, nil
}

func (k *kvModule) Restore(next func() ([]byte, error)) (func(), error) {
	fresh := map[string]string{}
	for {
		rec, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		key, val, ok := bytes.Cut(rec, []byte{0})
		if !ok {
			return nil, errors.New("kv: bad record")
		}
		fresh[string(key)] = string(val)
	}
	if k.failRestore {
		return nil, errors.New("kv: restore refused")
	}
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.m = fresh
		k.restores++
	}, nil
}

type kvSnapshot struct {
	m    map[string]string
	fail bool
}

func (s *kvSnapshot) Persist(write func([]byte) error) error {
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		if s.fail && i == 1 {
			return errors.New("kv: persist failed")
		}
		if err := write(append(append([]byte(k), 0), s.m[k]...)); err != nil {
			return err
		}
	}
	return nil
}

func (s *kvSnapshot) Release() {}

// listModule is a second test module: an append-only list of strings.
type listModule struct {
	mu    sync.RWMutex
	items []string
}

func (l *listModule) Name() string { return "list" }

func (l *listModule) Handlers() map[concordv1.CommandType]Handler {
	return map[concordv1.CommandType]Handler{
		cmdLogAdd: {
			New: func() proto.Message { return &wrapperspb.StringValue{} },
			Apply: func(_ uint64, msg proto.Message) (any, error) {
				l.mu.Lock()
				defer l.mu.Unlock()
				l.items = append(l.items, msg.(*wrapperspb.StringValue).GetValue())
				return len(l.items), nil
			},
		},
	}
}

func (l *listModule) list() []string {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return slices.Clone(l.items)
}

func (l *listModule) Snapshot() (ModuleSnapshot, error) {
	return &listSnapshot{items: l.list()}, nil
}

func (l *listModule) Restore(next func() ([]byte, error)) (func(), error) {
	var fresh []string
	for {
		rec, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		fresh = append(fresh, string(rec))
	}
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.items = fresh
	}, nil
}

type listSnapshot struct{ items []string }

func (s *listSnapshot) Persist(write func([]byte) error) error {
	for _, it := range s.items {
		if err := write([]byte(it)); err != nil {
			return err
		}
	}
	return nil
}

func (s *listSnapshot) Release() {}

// put builds a test command's message ("k=v" for cmdKVPut, a key for
// cmdKVDelete, an item for cmdLogAdd).
func put(kv string) proto.Message { return wrapperspb.String(kv) }

// encode builds raw command bytes: type byte + body.
func encode(t concordv1.CommandType, msg proto.Message) []byte {
	b, err := proto.Marshal(msg)
	if err != nil {
		panic(err)
	}
	return append([]byte{byte(t)}, b...)
}
