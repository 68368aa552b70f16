package rendezvous

import (
	"context"
	"sync"
)

// MemStore is an in-process Store, for running several ranks inside one
// test process.
type MemStore struct {
	mu      sync.Mutex
	m       map[string][]byte
	changed chan struct{} // closed and replaced on every Set
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{m: map[string][]byte{}, changed: make(chan struct{})}
}

// Set stores a copy of val.
func (s *MemStore) Set(key string, val []byte) error {
	s.mu.Lock()
	s.m[key] = append([]byte(nil), val...)
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
	return nil
}

// Get waits for key.
func (s *MemStore) Get(ctx context.Context, key string) ([]byte, error) {
	for {
		s.mu.Lock()
		v, ok := s.m[key]
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return append([]byte(nil), v...), nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
