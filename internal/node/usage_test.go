package node

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/service"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// spin burns about d of CPU on the calling goroutine.
func spin(d time.Duration) {
	var a, b [1]int
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for start := time.Now(); time.Since(start) < d; {
		a[0]++
		b[0] += a[0]
	}
}

func usageNode(t *testing.T) (pb.NodeClient, string) {
	t.Helper()
	dir := t.TempDir()
	n, err := New(Config{Node: config.Node{Security: config.Security{Insecure: true}, ID: "meter"}})
	if err != nil {
		t.Fatal(err)
	}
	svc := service.Service{Name: "work", Methods: []service.Method{
		{Name: "burn", Mode: service.Read, Handler: func(ctx context.Context, r *service.Request) (*service.Response, error) {
			spin(20 * time.Millisecond)
			return &service.Response{Body: make([]byte, 3000)}, nil
		}},
		{Name: "write", Mode: service.Read, Handler: func(ctx context.Context, r *service.Request) (*service.Response, error) {
			f, err := os.Create(filepath.Join(dir, "f"))
			if err != nil {
				return nil, err
			}
			defer f.Close()
			if _, err := f.Write(make([]byte, 1<<20)); err != nil {
				return nil, err
			}
			return nil, f.Sync()
		}},
		{Name: "child", Mode: service.Read, Handler: func(ctx context.Context, r *service.Request) (*service.Response, error) {
			return &service.Response{Used: service.Usage{CPU: 7 * time.Second, DiskRead: 4096}}, nil
		}},
	}}
	if err := n.Register(svc, 0); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	conns := transport.NewConns()
	t.Cleanup(func() { conns.Close() })
	cl, err := conns.Client(n.RPCAddr())
	if err != nil {
		t.Fatal(err)
	}
	return cl, n.cfg.ID
}

func callUsage(t *testing.T, cl pb.NodeClient, ctx context.Context, method string, body []byte) (service.CallUsage, bool) {
	t.Helper()
	var tr metadata.MD
	if _, err := cl.Call(ctx, &pb.CallRequest{Service: "work", Method: method, Body: body, Mode: pb.Mode(service.Read)}, grpc.Trailer(&tr)); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	return transport.UsageFromTrailer(tr)
}

// A call naming a subscriber comes back with what it used: its thread's
// CPU time, its message sizes both ways, what the handler reports it used
// elsewhere, and the node's accounting cycle once one has closed; a call
// naming none is not measured.
func TestNodeMeasuresUsagePerSubscriberRequest(t *testing.T) {
	cl, id := usageNode(t)
	ctx := transport.WithSubscriber(context.Background(), "shop")
	if _, ok := callUsage(t, cl, context.Background(), "burn", nil); ok {
		t.Fatal("a call without a subscriber came back with usage")
	}
	u, ok := callUsage(t, cl, ctx, "burn", make([]byte, 500))
	if !ok {
		t.Fatal("no usage in the trailer")
	}
	if u.Node != id {
		t.Errorf("node = %q, want %q", u.Node, id)
	}
	// The spin is timed by the wall clock, so on a loaded machine the
	// thread gets less than 20 ms; it cannot get more than the call took.
	if u.CPU < 2*time.Millisecond || u.CPU > 2*time.Second {
		t.Errorf("CPU = %v, want about 20ms", u.CPU)
	}
	if u.NetIn < 500 || u.NetIn > 600 || u.NetOut < 3000 || u.NetOut > 3100 {
		t.Errorf("net in/out = %d/%d, want the message sizes (about 500 and 3000)", u.NetIn, u.NetOut)
	}
	u, _ = callUsage(t, cl, ctx, "child", nil)
	if u.CPU < 7*time.Second || u.DiskRead < 4096 {
		t.Errorf("the handler's own report was not added: %+v", u.Usage)
	}
	// The accounting cycle closes every 100 ms; the next call carries it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		u, _ = callUsage(t, cl, ctx, "burn", nil)
		if u.Load.Interval > 0 && u.Load.Used.CPU > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if u.Load.Interval <= 0 || u.Load.Cores <= 0 || u.Load.CPUBusy <= 0 || u.Load.Used.CPU <= 0 {
		t.Errorf("no accounting cycle with the requests' use in it: %+v", u.Load)
	}
}

// Disk is measured from the thread's I/O accounting: a synced 1 MiB write
// shows as write_bytes where the kernel keeps per-task I/O accounting.
func TestNodeMeasuresThreadDiskWrites(t *testing.T) {
	if _, err := os.Stat("/proc/thread-self/io"); err != nil {
		t.Skip("no per-task I/O accounting here")
	}
	cl, _ := usageNode(t)
	u, ok := callUsage(t, cl, transport.WithSubscriber(context.Background(), "shop"), "write", nil)
	if !ok {
		t.Fatal("no usage")
	}
	// tmpfs has no backing store and counts no write_bytes.
	if u.DiskWrite == 0 {
		t.Skip("the temp dir's filesystem counts no write_bytes (tmpfs?)")
	}
	if u.DiskWrite < 1<<20 {
		t.Errorf("DiskWrite = %d, want at least the 1 MiB written", u.DiskWrite)
	}
}

func TestUsageEncodingRoundTrip(t *testing.T) {
	in := service.CallUsage{Node: "n,1&x", Usage: service.Usage{CPU: 3 * time.Millisecond, DiskRead: 1, DiskWrite: 2, NetIn: 3, NetOut: 4},
		Load: service.NodeLoad{Interval: 100 * time.Millisecond, Used: service.Usage{CPU: time.Second}, CPUBusy: 0.5, DiskBusy: 0.25, Cores: 2}}
	out, ok := transport.DecodeUsage(transport.EncodeUsage(in))
	if !ok || out != in {
		t.Fatalf("round trip: %+v, %v; want %+v", out, ok, in)
	}
	for _, bad := range []string{"", "cpu=1", "node=a&cpu=-1", "node=a&cbusy=NaN", "%zz"} {
		if _, ok := transport.DecodeUsage(bad); ok {
			t.Errorf("DecodeUsage(%q) accepted", bad)
		}
	}
}

// TestAccountingPausesWhileIdle: a cycle in which no request completed
// stops the ticker (an idle node does not wake to read /proc), and the
// next completed request starts it again, counted in the cycle it starts.
func TestAccountingPausesWhileIdle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clk := clock.NewManual(time.Unix(1_000_000, 0))
	a := newAccounting(clk, 100*time.Millisecond)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); a.run(stop) }()
	defer func() { close(stop); <-done }()

	a.add(service.Usage{CPU: time.Millisecond})
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // the ticker
		t.Fatal(err)
	}
	clk.Advance(100 * time.Millisecond)
	waitFor(t, 5*time.Second, func() bool { return a.load().Used.CPU == time.Millisecond })
	clk.Advance(100 * time.Millisecond) // a cycle with nothing completed
	waitFor(t, 5*time.Second, func() bool { return a.load().Used.CPU == 0 })
	waitFor(t, 5*time.Second, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.paused })
	if err := clk.BlockUntilContext(ctx, 0); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second) // paused: no cycle closes
	a.add(service.Usage{CPU: 2 * time.Millisecond})
	if err := clk.BlockUntilContext(ctx, 1); err != nil { // ticking again
		t.Fatal(err)
	}
	clk.Advance(100 * time.Millisecond)
	waitFor(t, 5*time.Second, func() bool { return a.load().Used.CPU == 2*time.Millisecond })
	if iv := a.load().Interval; iv != 100*time.Millisecond {
		t.Fatalf("the woken cycle spans %v, want 100ms (from the wake, not the pause)", iv)
	}
}
