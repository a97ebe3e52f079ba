package localcluster

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestWaitReturnsOnceReadyOrTheLastReason(t *testing.T) {
	n := 0
	err := Wait(context.Background(), time.Second, func(context.Context) error {
		if n++; n < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("err %v after %d calls", err, n)
	}
	err = Wait(context.Background(), 100*time.Millisecond, func(context.Context) error { return errors.New("2 of 3 nodes") })
	if err == nil || !strings.Contains(err.Error(), "2 of 3 nodes") {
		t.Fatalf("err %v, want the last reason", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Wait(ctx, 0, func(context.Context) error { return errors.New("never") }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: err %v", err)
	}
}

func TestWaitTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := WaitTCP(context.Background(), ln.Addr().String(), time.Second); err != nil {
		t.Fatal(err)
	}
}
