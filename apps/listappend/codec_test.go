package listappend

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"
)

func TestAppendCodecRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		key  string
		elem uint64
		body string
	}{
		{"k", 0, "k=0"},
		{"user:42/list", 7, "user:42/list=7"},
		{"ключ", math.MaxUint64, "ключ=18446744073709551615"},
	} {
		b := EncodeAppend(tc.key, tc.elem)
		if string(b) != tc.body {
			t.Errorf("EncodeAppend(%q, %d) = %q, want %q", tc.key, tc.elem, b, tc.body)
		}
		k, e, err := DecodeAppend(b)
		if err != nil || k != tc.key || e != tc.elem {
			t.Errorf("DecodeAppend(%q) = %q, %d, %v", b, k, e, err)
		}
	}
}

func TestListCodec(t *testing.T) {
	for _, l := range [][]uint64{nil, {0}, {1, 22, 333}, {math.MaxUint64, 0, 5}} {
		b := EncodeList(l)
		if len(b) != encodedLen(l) {
			t.Errorf("encodedLen(%v) = %d, EncodeList is %d bytes", l, encodedLen(l), len(b))
		}
		got, err := DecodeList(b)
		if err != nil || !slices.Equal(got, l) {
			t.Errorf("DecodeList(%q) = %v, %v, want %v", b, got, err, l)
		}
	}
	for _, bad := range []string{" ", "1 ", " 1", "1  2", "01", "1,2", "-1", "18446744073709551616"} {
		if l, err := DecodeList([]byte(bad)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("DecodeList(%q) = %v, %v, want ErrBadRequest", bad, l, err)
		}
	}
}

// FuzzDecodeAppend checks that the decoder never panics, that it accepts
// exactly the canonical encodings (decode then encode gives the input
// back), and that what it accepts the read decoder accepts as a key.
func FuzzDecodeAppend(f *testing.F) {
	for _, s := range []string{"k=0", "k=1", "a=18446744073709551615", "a=18446744073709551616",
		"=1", "k=", "k=01", "k=+1", "k=1=2", "a b=1", "\xff=1", "ключ=5", "k\x00=1", "k=1\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		key, elem, err := DecodeAppend(body)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("DecodeAppend(%q): error %v is neither ErrBadRequest nor ErrTooLarge", body, err)
			}
			return
		}
		if got := EncodeAppend(key, elem); !bytes.Equal(got, body) {
			t.Fatalf("DecodeAppend(%q) = %q, %d, which encodes as %q", body, key, elem, got)
		}
		if k, err := DecodeReadKey([]byte(key)); err != nil || k != key {
			t.Fatalf("key %q of an accepted append is not a valid read key: %v", key, err)
		}
	})
}

// FuzzDecodeList checks the read answer's decoder the same way.
func FuzzDecodeList(f *testing.F) {
	for _, s := range []string{"", "0", "1 2 3", "1  2", " 1", "01", "18446744073709551615 0"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeList(b)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("DecodeList(%q): %v is not ErrBadRequest", b, err)
			}
			return
		}
		if got := EncodeList(l); !bytes.Equal(got, b) {
			t.Fatalf("DecodeList(%q) = %v, which encodes as %q", b, l, got)
		}
	})
}
