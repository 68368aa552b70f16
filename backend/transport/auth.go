package transport

import (
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
)

// The pre-shared key. The group secret comes from the c10d Store, which
// torchrun's TCPStore serves to anyone who can reach it; with a key set
// (ZIPCCL_AUTH_KEY, or ZIPCCL_AUTH_KEY_FILE for orchestrators that mount
// secrets as files) the pairs authenticate with a key derived from both, so
// the Store alone no longer lets a stranger in. The key itself is never
// logged, reported or put in an error.

// AuthKeyEnv and AuthKeyFileEnv name the key's sources.
const (
	AuthKeyEnv     = "ZIPCCL_AUTH_KEY"
	AuthKeyFileEnv = "ZIPCCL_AUTH_KEY_FILE"
)

var (
	keyOnce sync.Once
	keyVal  []byte
	keyErr  error
)

// ProcessAuthKey is the process's pre-shared key, read once: nil when
// neither variable is set. A file's content counts as the key, less one
// trailing newline. An empty key, an unreadable file, or both variables
// set, is an error (a job that meant to set a key must not run without).
func ProcessAuthKey() ([]byte, error) {
	keyOnce.Do(func() { keyVal, keyErr = readAuthKey(os.Getenv(AuthKeyEnv), os.Getenv(AuthKeyFileEnv), os.ReadFile) })
	return keyVal, keyErr
}

func readAuthKey(inline, file string, read func(string) ([]byte, error)) ([]byte, error) {
	switch {
	case inline != "" && file != "":
		return nil, fmt.Errorf("zipccl: both %s and %s are set; set one", AuthKeyEnv, AuthKeyFileEnv)
	case inline != "":
		return []byte(inline), nil
	case file != "":
		b, err := read(file)
		if err != nil {
			// the path, not the content, may appear
			return nil, fmt.Errorf("zipccl: reading the auth key from %s=%s: %v", AuthKeyFileEnv, file, errors.Unwrap(err))
		}
		k := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if k == "" {
			return nil, fmt.Errorf("zipccl: the auth key file %s is empty", file)
		}
		return []byte(k), nil
	}
	return nil, nil
}

// pairKey is the key a pair authenticates with: the group secret alone, or,
// with a pre-shared key, one derived from both (HKDF-SHA256), which the
// Store does not reveal.
func pairKey(secret, authKey []byte) ([]byte, error) {
	if authKey == nil {
		return secret, nil
	}
	return hkdf.Key(sha256.New, authKey, secret, "zipccl pair key v1", 32)
}

// Flags a hello and a reply carry: what each side will do, so that ranks
// configured differently fail at once with a clear error instead of a
// failed MAC or a garbled stream.
const (
	flagHasKey  = 1 << 0
	flagEncrypt = 1 << 1
)

// mismatch says how the peer's flags differ from this side's, or "".
func mismatch(mine, theirs byte, peer int) string {
	switch {
	case mine&flagHasKey != 0 && theirs&flagHasKey == 0:
		return fmt.Sprintf("peer has no auth key: rank %d has none, this rank has one (%s or %s): set the same key on every rank", peer, AuthKeyEnv, AuthKeyFileEnv)
	case mine&flagHasKey == 0 && theirs&flagHasKey != 0:
		return fmt.Sprintf("this rank has no auth key, its peer rank %d has one (%s or %s): set the same key on every rank", peer, AuthKeyEnv, AuthKeyFileEnv)
	case mine&flagEncrypt != 0 && theirs&flagEncrypt == 0:
		return fmt.Sprintf("peer does not encrypt: rank %d runs without encryption (ZIPCCL_ENCRYPT or the group option encrypt), this rank with it: set it alike on every rank", peer)
	case mine&flagEncrypt == 0 && theirs&flagEncrypt != 0:
		return fmt.Sprintf("this rank does not encrypt, its peer rank %d does (ZIPCCL_ENCRYPT or the group option encrypt): set it alike on every rank", peer)
	}
	return ""
}
