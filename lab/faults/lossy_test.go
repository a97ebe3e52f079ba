package faults

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestDelayDraws: every delay is within Delay ± Jitter and the draws
// spread over the whole range (so packets sent close together reorder).
func TestDelayDraws(t *testing.T) {
	m := Impairment{Loss: 0.1, Delay: 30 * time.Millisecond, Jitter: 20 * time.Millisecond}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lo, hi := time.Hour, time.Duration(0)
	for range 10000 {
		d := m.delayOf(rng.Float64())
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 10*time.Millisecond || hi > 50*time.Millisecond || lo > 11*time.Millisecond || hi < 49*time.Millisecond {
		t.Fatalf("delays span [%v, %v], want about [10ms, 50ms]", lo, hi)
	}
	for _, bad := range []Impairment{{Loss: 1}, {Loss: -0.1}, {Delay: 10 * time.Millisecond, Jitter: 20 * time.Millisecond}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

var (
	exeOnce sync.Once
	exePath string
	exeErr  error
)

// TestMain removes the binary testExe built.
func TestMain(m *testing.M) {
	code := m.Run()
	if exePath != "" {
		os.RemoveAll(filepath.Dir(exePath))
	}
	os.Exit(code)
}

// testExe builds the neptune binary once for the tests that run it.
func testExe(t *testing.T) string {
	exeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "neptune-faults-exe-")
		if err != nil {
			exeErr = err
			return
		}
		exePath = filepath.Join(dir, "neptune")
		if out, err := exec.Command("go", "build", "-o", exePath, "github.com/neptune-cluster/neptune/lab/cmd/neptune").CombinedOutput(); err != nil {
			exeErr = err
			t.Logf("go build: %s", out)
		}
	})
	if exeErr != nil {
		t.Fatalf("go build: %v", exeErr)
	}
	return exePath
}

// TestImpairedLink sends numbered datagrams from an impaired host to
// another and checks what arrives: about the loss asked for, each one
// delayed within Delay ± Jitter (plus scheduling slack), some out of
// order; datagrams the other way are untouched; Close leaves nothing.
func TestImpairedLink(t *testing.T) {
	if testing.Short() {
		t.Skip("faults: skipped in -short")
	}
	if err := Available(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("faults: CI is set but network namespaces cannot be made: %v", err)
		}
		t.Skipf("!!! IMPAIRED LINK TEST NOT RUN: %v", err)
	}
	exe := testExe(t)
	n, err := NewNet()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	a, err := n.AddHost("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.AddHost("b")
	if err != nil {
		t.Fatal(err)
	}
	imp := Impairment{Loss: 0.2, Delay: 30 * time.Millisecond, Jitter: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.Impair(ctx, exe, []string{"a"}, imp, 1); err != nil {
		t.Fatal(err)
	}
	listen := func(h *Host) *net.UDPConn {
		var c *net.UDPConn
		if err := inNS(h.NS, func() (err error) {
			c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(h.IP), Port: 9000})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ca, cb := listen(a), listen(b)
	// send n datagrams from → to, 2 ms apart, and collect (seq, one-way delay).
	send := func(from, to *net.UDPConn, toHost *Host) (seqs []uint32, delays []time.Duration) {
		const count = 400
		got := make(chan struct{})
		go func() {
			defer close(got)
			buf := make([]byte, 64)
			for {
				_ = to.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
				k, _, err := to.ReadFromUDP(buf)
				if err != nil || k < 12 {
					return
				}
				seqs = append(seqs, binary.BigEndian.Uint32(buf))
				delays = append(delays, time.Since(time.Unix(0, int64(binary.BigEndian.Uint64(buf[4:])))))
			}
		}()
		dst := &net.UDPAddr{IP: net.ParseIP(toHost.IP), Port: 9000}
		for i := range count {
			msg := binary.BigEndian.AppendUint32(nil, uint32(i))
			msg = binary.BigEndian.AppendUint64(msg, uint64(time.Now().UnixNano()))
			if _, err := from.WriteToUDP(msg, dst); err != nil {
				t.Fatalf("send %d: %v", i, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		<-got
		return seqs, delays
	}
	seqs, delays := send(ca, cb, b)
	frac := float64(len(seqs)) / 400
	if frac < 0.65 || frac > 0.92 {
		t.Errorf("impaired link delivered %.2f of the datagrams, want about 0.8", frac)
	}
	reordered := 0
	for i := 1; i < len(seqs); i++ {
		if seqs[i] < seqs[i-1] {
			reordered++
		}
	}
	if reordered == 0 {
		t.Errorf("no datagram arrived out of order")
	}
	var sum time.Duration
	early := 0
	for _, d := range delays {
		sum += d
		if d < 9*time.Millisecond {
			early++
		}
	}
	if early > 0 {
		t.Errorf("%d datagrams arrived sooner than Delay - Jitter", early)
	}
	if mean := sum / time.Duration(max(1, len(delays))); mean < 25*time.Millisecond || mean > 80*time.Millisecond {
		t.Errorf("mean one-way delay %v, want about 30ms", mean)
	}
	t.Logf("a→b: %d of 400 arrived, %d out of order, mean delay %v", len(seqs), reordered, sum/time.Duration(max(1, len(delays))))
	back, backDelays := send(cb, ca, a)
	if len(back) < 396 {
		t.Errorf("unimpaired direction delivered %d of 400", len(back))
	}
	for _, d := range backDelays {
		if d > 20*time.Millisecond {
			t.Errorf("unimpaired direction delayed a datagram %v", d)
			break
		}
	}
}

// TestElectionsFromLogs counts the epochs entered in the window that no
// replica had reached before it, once each however many nodes log them.
func TestElectionsFromLogs(t *testing.T) {
	lines := []string{
		`time=2026-11-28T03:29:00.475Z level=INFO msg="replica role changed" node=n1 service=listappend partition=0 role=primary epoch=1 primary=n1 applied=0`,
		`time=2026-11-28T03:29:00.477Z level=INFO msg="replica role changed" node=n3 service=listappend partition=0 role=secondary epoch=1 primary=n1 applied=0`,
		`time=2026-11-28T03:29:02.006Z level=INFO msg="replica role changed" node=n2 service=kv partition=1 role=recovering epoch=2 primary="" applied=1`,
		`time=2026-11-28T03:29:02.169Z level=INFO msg="replica role changed" node=n3 service=kv partition=1 role=recovering epoch=2 primary="" applied=1`,
		`time=2026-11-28T03:29:02.478Z level=INFO msg="replica role changed" node=n2 service=kv partition=1 role=candidate epoch=3 primary="" applied=1`,
		`time=2026-11-28T03:29:03.154Z level=INFO msg="replica role changed" node=n3 service=listappend partition=0 role=recovering epoch=1 primary=n1 applied=6`,
		`time=2026-11-28T03:29:09.000Z level=INFO msg="replica role changed" node=n3 service=listappend partition=0 role=primary epoch=2 primary=n3 applied=6`,
		`time=2026-11-28T03:29:01.000Z level=INFO msg="node started" node=n1`,
	}
	from, _ := time.Parse(time.RFC3339, "2026-11-28T03:29:01Z")
	to, _ := time.Parse(time.RFC3339, "2026-11-28T03:29:05Z")
	if got := electionsIn(lines, from, to); got != 2 {
		t.Fatalf("elections in window = %d, want 2 (kv/1 epochs 2 and 3)", got)
	}
	if got := electionsIn(lines, from, to.Add(10*time.Second)); got != 3 {
		t.Fatalf("elections in the longer window = %d, want 3", got)
	}
}
