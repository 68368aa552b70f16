// Package rendezvous is how the ranks of a group find each other: through the
// c10d Store that torch hands to the backend (addresses, the group secret,
// abort reports), and through the choice of the local network interface.
package rendezvous

import (
	"context"
	"crypto/rand"
	"fmt"
	"strconv"
)

// Store is the part of c10d::Store the engine uses. Implementations must be
// safe for concurrent use.
type Store interface {
	// Set publishes a value under key.
	Set(key string, val []byte) error
	// Get waits until key exists or ctx is done, then returns its value.
	Get(ctx context.Context, key string) ([]byte, error)
}

// Keys under the group's (already prefixed) store.
const (
	secretKey = "zipccl/secret"
	abortKey  = "zipccl/abort"
)

func addrKey(rank int) string { return "zipccl/addr/" + strconv.Itoa(rank) }
func hostKey(rank int) string { return "zipccl/host/" + strconv.Itoa(rank) }

// SecretLen is the size of a group secret in bytes.
const SecretLen = 32

// PublishSecret is called by rank 0 at group creation: it draws a fresh
// random secret, so a connection made for an older incarnation of a group
// with the same name cannot authenticate.
func PublishSecret(s Store) ([]byte, error) {
	secret := make([]byte, SecretLen)
	if _, err := rand.Read(secret); err != nil {
		return nil, fmt.Errorf("zipccl: drawing the group secret: %w", err)
	}
	if err := s.Set(secretKey, secret); err != nil {
		return nil, fmt.Errorf("zipccl: publishing the group secret: %w", err)
	}
	return secret, nil
}

// FetchSecret waits for rank 0's secret.
func FetchSecret(ctx context.Context, s Store) ([]byte, error) {
	v, err := s.Get(ctx, secretKey)
	if err != nil {
		return nil, fmt.Errorf("zipccl: waiting for the group secret from rank 0: %w", err)
	}
	if len(v) != SecretLen {
		return nil, fmt.Errorf("zipccl: group secret has %d bytes, want %d", len(v), SecretLen)
	}
	return v, nil
}

// PublishAddr announces where rank listens.
func PublishAddr(s Store, rank int, addr string) error {
	if err := s.Set(addrKey(rank), []byte(addr)); err != nil {
		return fmt.Errorf("zipccl: publishing the address of rank %d: %w", rank, err)
	}
	return nil
}

// FetchAddr waits for a peer's address.
func FetchAddr(ctx context.Context, s Store, rank int) (string, error) {
	v, err := s.Get(ctx, addrKey(rank))
	if err != nil {
		return "", fmt.Errorf("zipccl: waiting for the address of rank %d: %w", rank, err)
	}
	return string(v), nil
}

// PublishHost announces rank's host identity (package hosts).
func PublishHost(s Store, rank int, id string) error {
	if err := s.Set(hostKey(rank), []byte(id)); err != nil {
		return fmt.Errorf("zipccl: publishing the host of rank %d: %w", rank, err)
	}
	return nil
}

// FetchHost waits for a peer's host identity.
func FetchHost(ctx context.Context, s Store, rank int) (string, error) {
	v, err := s.Get(ctx, hostKey(rank))
	if err != nil {
		return "", fmt.Errorf("zipccl: waiting for the host of rank %d: %w", rank, err)
	}
	return string(v), nil
}

// ReportAbort records why the group broke, so that ranks which only notice
// a timeout can still name the cause.
func ReportAbort(s Store, msg string) error { return s.Set(abortKey, []byte(msg)) }

// AbortReport returns a recorded abort message, or "" if none is recorded
// before ctx ends.
func AbortReport(ctx context.Context, s Store) string {
	v, err := s.Get(ctx, abortKey)
	if err != nil {
		return ""
	}
	return string(v)
}
