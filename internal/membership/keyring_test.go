package membership

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyringFileRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keyring.json")
	k1, err := CreateKeyringFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) != KeySize {
		t.Fatalf("key of %d bytes", len(k1))
	}
	if _, err := CreateKeyringFile(path); !errors.Is(err, ErrKeyringExists) {
		t.Fatalf("second create: %v", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("keyring mode %v, want 0600", fi.Mode().Perm())
	}
	k2, _ := GenerateKey()
	keys := func() [][]byte {
		t.Helper()
		ks, err := ReadKeyringFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return ks
	}
	same := func(got [][]byte, want ...[]byte) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				return false
			}
		}
		return true
	}
	if err := InstallKey(path, k2); err != nil {
		t.Fatal(err)
	}
	if err := InstallKey(path, k2); err != nil {
		t.Fatal(err)
	}
	if ks := keys(); !same(ks, k1, k2) {
		t.Fatal("install did not add k2 as secondary once")
	}
	if err := RemoveKey(path, k1); !errors.Is(err, ErrRemovePrimary) {
		t.Fatalf("remove primary: %v", err)
	}
	if err := UseKey(path, k2); err != nil {
		t.Fatal(err)
	}
	if ks := keys(); !same(ks, k2, k1) {
		t.Fatal("use did not make k2 primary")
	}
	if err := RemoveKey(path, k1); err != nil {
		t.Fatal(err)
	}
	if ks := keys(); !same(ks, k2) {
		t.Fatal("remove did not drop k1")
	}
	if err := UseKey(path, k1); !errors.Is(err, ErrKeyNotInstalled) {
		t.Fatalf("use of a removed key: %v", err)
	}
	if err := RemoveKey(path, k1); !errors.Is(err, ErrKeyNotInstalled) {
		t.Fatalf("remove of a removed key: %v", err)
	}
	kr, err := LoadKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(kr.GetPrimaryKey(), k2) {
		t.Fatal("loaded keyring's primary is not the file's first key")
	}
}

func TestInstallCreatesAMissingKeyring(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k")
	k, _ := GenerateKey()
	if err := InstallKey(path, k); err != nil {
		t.Fatal(err)
	}
	if ks, err := ReadKeyringFile(path); err != nil || len(ks) != 1 || !bytes.Equal(ks[0], k) {
		t.Fatalf("keys %v, %v", ks, err)
	}
}

func TestParseKeyringRejects(t *testing.T) {
	k := EncodeKey(bytes.Repeat([]byte{1}, 32))
	short := EncodeKey([]byte("short"))
	for name, in := range map[string]string{
		"empty list":    `[]`,
		"not a list":    `{"k": 1}`,
		"not base64":    `["%%%"]`,
		"bad size":      `["` + short + `"]`,
		"duplicate":     `["` + k + `", "` + k + `"]`,
		"trailing data": `["` + k + `"] []`,
		"empty":         ``,
	} {
		if _, err := ParseKeyring([]byte(in)); err == nil {
			t.Errorf("%s: accepted %q", name, in)
		}
	}
	if ks, err := ParseKeyring([]byte(" [ \"" + k + "\" ]\n")); err != nil || len(ks) != 1 {
		t.Fatalf("valid keyring: %v", err)
	}
	if _, err := ParseKeyring([]byte(strings.Repeat(" ", MaxKeyringFile+1))); err == nil {
		t.Fatal("oversized keyring accepted")
	}
}

func TestSyncKeyringRotatesALiveKeyring(t *testing.T) {
	k1, _ := GenerateKey()
	k2, _ := GenerateKey()
	kr, err := NewKeyring([][]byte{k1})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range [][][]byte{{k1, k2}, {k2, k1}, {k2}} {
		if err := SyncKeyring(kr, step); err != nil {
			t.Fatal(err)
		}
		got := kr.GetKeys()
		if len(got) != len(step) || !bytes.Equal(got[0], step[0]) {
			t.Fatalf("keyring %d keys, primary ok %v; want %d", len(got), bytes.Equal(got[0], step[0]), len(step))
		}
	}
	if err := SyncKeyring(nil, [][]byte{k1}); err == nil {
		t.Fatal("a member without a keyring accepted keys")
	}
}

func FuzzParseKeyring(f *testing.F) {
	f.Add(MarshalKeyring([][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)}))
	f.Add([]byte(`["AAAA"]`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := ParseKeyring(b)
		if err != nil {
			return
		}
		again, err := ParseKeyring(MarshalKeyring(keys))
		if err != nil || len(again) != len(keys) {
			t.Fatalf("re-encoded keyring does not parse the same: %v", err)
		}
		for i := range keys {
			if !bytes.Equal(keys[i], again[i]) {
				t.Fatalf("key %d changed", i)
			}
		}
	})
}
