package walbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestMainComparesEveryStore(t *testing.T) {
	var out bytes.Buffer
	if err := Main(context.Background(), []string{"-n", "40", "-read", "10", "-rounds", "1", "-dir", t.TempDir()}, &out); err != nil {
		t.Fatal(err)
	}
	for _, c := range contenders {
		if !strings.Contains(out.String(), c.name+" ") {
			t.Fatalf("no row for %s in:\n%s", c.name, out.String())
		}
	}
}

func TestMainRejectsBadFlags(t *testing.T) {
	var out bytes.Buffer
	if err := Main(context.Background(), []string{"-read", "0"}, &out); err == nil {
		t.Fatal("accepted -read 0")
	}
}
