package adapter_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/neptune-cluster/neptune/adapter"
)

func TestFrameReader(t *testing.T) {
	in := "{\"data\":\"a\"}\n\n  \r\n{\"base64\":\"/w==\"}\r\n" + `{"data":"` + strings.Repeat("x", 40) + "\"}\n" +
		"not json\n" + `{"data":"a","base64":"AA=="}` + "\n" + `{"data":""}` + "\n" + `{"end":true}` + "\n" + `{"data":"last"}`
	fr := adapter.NewFrameReader(strings.NewReader(in), 32)
	type res struct {
		body string
		err  error
	}
	want := []res{{"a", nil}, {"\xff", nil}, {"", adapter.ErrFrameTooLarge}, {"", adapter.ErrBadFrame}, {"", adapter.ErrBadFrame}, {"", nil}, {"", io.EOF}, {"last", nil}, {"", io.EOF}}
	for i, w := range want {
		b, err := fr.Next()
		if string(b) != w.body || !errors.Is(err, w.err) || (w.err == nil && err != nil) {
			t.Errorf("frame %d: %q %v, want %q %v", i, b, err, w.body, w.err)
		}
	}
}

// FuzzFrameReader: whatever a client sends, the reader never panics,
// never returns a frame over its limit, goes on after a bad frame, and
// reads back exactly the messages a well-behaved client encoded.
func FuzzFrameReader(f *testing.F) {
	f.Add([]byte("{\"data\":\"a\"}\n{\"base64\":\"/w==\"}\n"), []byte("hi\xff"), 8)
	f.Add([]byte("\n\r\n{\"end\":true}"), []byte(""), 1)
	f.Add([]byte(strings.Repeat("x", 100)+"\n{\"data\":1}"), []byte("\n\"\\"), 40)
	f.Fuzz(func(t *testing.T, raw, msg []byte, max int) {
		max = 1 + abs(max)%4096
		fr := adapter.NewFrameReader(bytes.NewReader(raw), max)
		for range len(raw) + 2 {
			_, err := fr.Next()
			if err == io.EOF {
				break
			}
			if err != nil && !errors.Is(err, adapter.ErrFrameTooLarge) && !errors.Is(err, adapter.ErrBadFrame) {
				t.Fatalf("reading %q: %v", raw, err)
			}
		}
		line := adapter.AppendFrame(nil, msg)
		stream := append(append(append([]byte{}, line...), raw...), append([]byte("\n"), line...)...)
		fr = adapter.NewFrameReader(bytes.NewReader(stream), len(line))
		got, err := fr.Next()
		if err != nil || !bytes.Equal(got, msg) {
			t.Fatalf("first of %q: %q %v, want %q", stream, got, err, msg)
		}
		var last []byte
		for {
			b, err := fr.Next()
			if err == io.EOF {
				break
			}
			if err == nil {
				last = b
			}
		}
		if !bytes.Equal(last, msg) && !bytes.Contains(raw, []byte(`"end"`)) {
			t.Fatalf("last of %q: %q, want %q", stream, last, msg)
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
