package membership

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"github.com/hashicorp/memberlist"

	"github.com/neptune-cluster/neptune/internal/pki"
)

// Gossip keys. memberlist encrypts and authenticates every gossip packet
// and stream with AES-GCM under the primary key of its keyring and
// accepts any installed key, so keys rotate without a flag day: install
// the new key on every member, make it primary on every member, then
// remove the old one.
//
// A keyring file is a JSON list of base64 keys, the primary first, as
// Serf and Consul keep theirs:
//
//	["8Ue8g6TqTdQ8L3nLv1d2zqAp0Q6lB5M9lQm1yS0b4X0=", "…"]
//
// It is written with mode 0600. The same keys also derive the load polls'
// HMAC keys (transport.PollAuth), so one rotation covers both.

// KeySize is the size of keys GenerateKey makes (AES-256). memberlist
// accepts 16, 24 or 32 bytes.
const KeySize = 32

// MaxKeyringFile bounds a keyring file; a real one holds a few keys.
const MaxKeyringFile = 64 << 10

// GenerateKey returns a new random gossip key.
func GenerateKey() ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("membership: generate key: %w", err)
	}
	return k, nil
}

// EncodeKey is a key as it appears in a keyring file and on the command
// line (standard base64).
func EncodeKey(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// DecodeKey parses a base64 key and checks its size.
func DecodeKey(s string) ([]byte, error) {
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("membership: key is not base64: %w", err)
	}
	if err := memberlist.ValidateKey(k); err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	return k, nil
}

// ParseKeyring decodes a keyring file: a non-empty JSON list of distinct
// base64 keys, the primary first.
func ParseKeyring(b []byte) ([][]byte, error) {
	if len(b) > MaxKeyringFile {
		return nil, fmt.Errorf("membership: keyring larger than %d bytes", MaxKeyringFile)
	}
	var encoded []string
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&encoded); err != nil {
		return nil, fmt.Errorf("membership: keyring is not a JSON list of keys: %w", err)
	}
	if dec.More() {
		return nil, errors.New("membership: keyring has data after its list")
	}
	if len(encoded) == 0 {
		return nil, errors.New("membership: keyring holds no key")
	}
	keys := make([][]byte, 0, len(encoded))
	for i, s := range encoded {
		k, err := DecodeKey(s)
		if err != nil {
			return nil, fmt.Errorf("membership: keyring key %d: %w", i, err)
		}
		if indexOfKey(keys, k) >= 0 {
			return nil, fmt.Errorf("membership: keyring key %d is listed twice", i)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// MarshalKeyring encodes keys (the primary first) as a keyring file.
func MarshalKeyring(keys [][]byte) []byte {
	encoded := make([]string, len(keys))
	for i, k := range keys {
		encoded[i] = EncodeKey(k)
	}
	b, _ := json.MarshalIndent(encoded, "", "  ")
	return append(b, '\n')
}

// ReadKeyringFile reads and parses a keyring file.
func ReadKeyringFile(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("membership: read keyring: %w", err)
	}
	keys, err := ParseKeyring(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

// WriteKeyringFile replaces path with keys (mode 0600, atomically).
func WriteKeyringFile(path string, keys [][]byte) error {
	if len(keys) == 0 {
		return errors.New("membership: a keyring needs a key")
	}
	for _, k := range keys {
		if err := memberlist.ValidateKey(k); err != nil {
			return fmt.Errorf("membership: %w", err)
		}
	}
	return pki.WriteFileAtomic(path, MarshalKeyring(keys), 0o600)
}

// ErrKeyringExists is returned by CreateKeyringFile for an existing file.
var ErrKeyringExists = errors.New("membership: keyring file exists")

// CreateKeyringFile writes a new keyring holding one fresh key and
// returns the key. It refuses to replace an existing file.
func CreateKeyringFile(path string) ([]byte, error) {
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("%w: %s", ErrKeyringExists, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("membership: %w", err)
	}
	k, err := GenerateKey()
	if err != nil {
		return nil, err
	}
	return k, WriteKeyringFile(path, [][]byte{k})
}

// InstallKey adds key to the keyring file as a secondary key (accepted,
// not yet used to send). A missing file is created with key as primary.
// Installing a key already there changes nothing.
func InstallKey(path string, key []byte) error {
	keys, err := ReadKeyringFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return WriteKeyringFile(path, [][]byte{key})
	}
	if err != nil {
		return err
	}
	if indexOfKey(keys, key) >= 0 {
		return nil
	}
	return WriteKeyringFile(path, append(keys, key))
}

// ErrKeyNotInstalled is returned for a key the keyring does not hold.
var ErrKeyNotInstalled = errors.New("membership: key not in the keyring")

// UseKey makes an installed key the primary: the key members send with.
func UseKey(path string, key []byte) error {
	keys, err := ReadKeyringFile(path)
	if err != nil {
		return err
	}
	i := indexOfKey(keys, key)
	if i < 0 {
		return ErrKeyNotInstalled
	}
	keys = append(keys[:i:i], keys[i+1:]...)
	return WriteKeyringFile(path, append([][]byte{key}, keys...))
}

// ErrRemovePrimary is returned for an attempt to remove the primary key.
var ErrRemovePrimary = errors.New("membership: the primary key cannot be removed; use another key first")

// RemoveKey drops a secondary key from the keyring file.
func RemoveKey(path string, key []byte) error {
	keys, err := ReadKeyringFile(path)
	if err != nil {
		return err
	}
	i := indexOfKey(keys, key)
	switch {
	case i < 0:
		return ErrKeyNotInstalled
	case i == 0:
		return ErrRemovePrimary
	}
	return WriteKeyringFile(path, append(keys[:i:i], keys[i+1:]...))
}

// NewKeyring returns a memberlist keyring of keys, keys[0] primary.
func NewKeyring(keys [][]byte) (*memberlist.Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("membership: a keyring needs a key")
	}
	kr, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil {
		return nil, fmt.Errorf("membership: %w", err)
	}
	return kr, nil
}

// LoadKeyring reads a keyring file into a memberlist keyring.
func LoadKeyring(path string) (*memberlist.Keyring, error) {
	keys, err := ReadKeyringFile(path)
	if err != nil {
		return nil, err
	}
	return NewKeyring(keys)
}

// SyncKeyring makes a live keyring hold exactly keys with keys[0]
// primary, in the order that never leaves it without a key both old and
// new peers accept: install the new keys, switch the primary, remove the
// keys no longer listed.
func SyncKeyring(kr *memberlist.Keyring, keys [][]byte) error {
	if kr == nil {
		return errors.New("membership: gossip runs without a keyring; it cannot be turned on live")
	}
	if len(keys) == 0 {
		return errors.New("membership: a keyring needs a key")
	}
	for _, k := range keys {
		if err := kr.AddKey(k); err != nil {
			return fmt.Errorf("membership: install key: %w", err)
		}
	}
	if err := kr.UseKey(keys[0]); err != nil {
		return fmt.Errorf("membership: use key: %w", err)
	}
	// A copy: RemoveKey shifts the keyring's slice in place.
	for _, k := range slices.Clone(kr.GetKeys()) {
		if indexOfKey(keys, k) < 0 {
			if err := kr.RemoveKey(k); err != nil {
				return fmt.Errorf("membership: remove key: %w", err)
			}
		}
	}
	return nil
}

func indexOfKey(keys [][]byte, k []byte) int {
	for i, have := range keys {
		if bytes.Equal(have, k) {
			return i
		}
	}
	return -1
}
