package walbench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestRunComparesEveryStore(t *testing.T) {
	var out bytes.Buffer
	cfg := Config{Entries: 40, Size: 1024, Batch: 1, Read: 10, Rounds: 1, Dir: t.TempDir()}
	if err := Run(context.Background(), cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, c := range contenders {
		if !strings.Contains(out.String(), c.name+" ") {
			t.Fatalf("no row for %s in:\n%s", c.name, out.String())
		}
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Read = 0
	if err := Run(context.Background(), cfg, &bytes.Buffer{}); err == nil {
		t.Fatal("accepted read 0")
	}
}
