package raftstore

import (
	"context"
	"testing"
)

func TestNewTestStore_Smoke(t *testing.T) {
	kv := newKV()
	s := NewTestStore(t, kv)
	res, idx, err := s.Apply(context.Background(), cmdKVPut, put("a=1"))
	if err != nil || res != "" || idx == 0 {
		t.Fatalf("apply: %v %v %v", res, idx, err)
	}
	if v, _ := kv.get("a"); v != "1" {
		t.Fatalf("got %q", v)
	}
}
