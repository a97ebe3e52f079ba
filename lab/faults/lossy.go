package faults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Impairment is a lossy, slow, reordering link: the stand-in for netem on
// a kernel without sch_netem. It applies to what a host sends to the
// other hosts (never to the observer): Loss of the packets are dropped
// silently in the switch (nftables `numgen random`), and every packet is
// held Delay ± Jitter (uniform) in the sender's namespace by a userspace
// delayer on an NFQUEUE queue, which releases packets when their delay is
// up, not in the order they came: packets reorder whenever two sent within
// 2·Jitter draw delays in the other order.
type Impairment struct {
	Loss          float64
	Delay, Jitter time.Duration
}

// Validate reports a loss outside [0, 1) or a jitter that could make a
// delay negative.
func (m Impairment) Validate() error {
	switch {
	case m.Loss < 0 || m.Loss >= 1:
		return fmt.Errorf("faults: loss %v not in [0, 1)", m.Loss)
	case m.Delay < 0 || m.Jitter < 0 || m.Jitter > m.Delay:
		return fmt.Errorf("faults: delay %v ± %v: need 0 <= jitter <= delay", m.Delay, m.Jitter)
	}
	return nil
}

func (m Impairment) String() string {
	return fmt.Sprintf("%.0f%% loss, %v ± %v delay (reordering)", m.Loss*100, m.Delay, m.Jitter)
}

// delayOf is the delay of a packet whose uniform draw in [0, 1) is u.
func (m Impairment) delayOf(u float64) time.Duration {
	return m.Delay - m.Jitter + time.Duration(u*float64(2*m.Jitter))
}

// DelayerVerb is the hidden `neptune bench` verb the delayer runs as (in
// a host's namespace); it reads a DelayerSpec as JSON from stdin.
const DelayerVerb = "lossy-link"

// DelayerSpec is one delayer's job.
type DelayerSpec struct {
	Queue  uint16
	Delay  time.Duration
	Jitter time.Duration
	Seed   uint64
}

// delayerQueue is the NFQUEUE queue number the suite's rules use (queues
// are per network namespace).
const delayerQueue = 7

// Delayer runs a delayer: it binds the spec's queue, prints "ready" on
// out, then holds each packet the kernel queues for its drawn delay and
// accepts it, until ctx ends (or SIGTERM/SIGKILL: the kernel then lets
// packets through, since the rule is --queue-bypass). It reports on out,
// every 10 s, the packets it released.
func Delayer(ctx context.Context, in io.Reader, out io.Writer) error {
	var spec DelayerSpec
	if err := json.NewDecoder(in).Decode(&spec); err != nil {
		return fmt.Errorf("delayer: spec: %w", err)
	}
	imp := Impairment{Delay: spec.Delay, Jitter: spec.Jitter}
	if err := imp.Validate(); err != nil {
		return err
	}
	q, err := openQueue(spec.Queue)
	if err != nil {
		return err
	}
	defer q.Close()
	fmt.Fprintln(out, "ready")
	rng := rand.New(rand.NewPCG(spec.Seed, 0x1055))
	var released, failed atomic.Int64
	buf := make([]byte, 1<<16)
	report := time.Now()
	for ctx.Err() == nil {
		if err := q.read(buf, func(id uint32) {
			time.AfterFunc(imp.delayOf(rng.Float64()), func() {
				if q.verdict(id, true) != nil {
					failed.Add(1)
				} else {
					released.Add(1)
				}
			})
		}); err != nil {
			return fmt.Errorf("delayer: %w", err)
		}
		if time.Since(report) > 10*time.Second {
			report = time.Now()
			fmt.Fprintf(out, "released %d (verdicts failed %d)\n", released.Load(), failed.Load())
		}
	}
	return nil
}

// Impair puts imp on every named host's links to the other hosts: a
// delayer process in each host's namespace (the binary exe re-executed
// with DelayerVerb), an iptables NFQUEUE rule on the host's egress to the
// subnet, bypassed for the observer's address, and nftables drop rules in
// the switch for the loss. The loss needs nft (Silent); the delay works
// without. Close (or Sweep) removes it all with the namespaces.
func (n *Net) Impair(ctx context.Context, exe string, hosts []string, imp Impairment, seed uint64) error {
	if err := imp.Validate(); err != nil {
		return err
	}
	if imp.Loss > 0 && !n.Silent {
		return errors.New("faults: loss needs nft in the switch namespace")
	}
	var loss []string
	for i, name := range hosts {
		h := n.Host(name)
		if h == nil {
			return fmt.Errorf("faults: impair %s: no such host", name)
		}
		if imp.Delay > 0 {
			n.mu.Lock()
			started := n.delayers[name]
			n.mu.Unlock()
			if started != (Impairment{}) && (started.Delay != imp.Delay || started.Jitter != imp.Jitter) {
				return fmt.Errorf("faults: %s's delayer runs with %s already", name, started)
			}
			if started == (Impairment{}) {
				if err := n.startDelayer(ctx, exe, h, DelayerSpec{Queue: delayerQueue, Delay: imp.Delay, Jitter: imp.Jitter, Seed: seed + uint64(i)}); err != nil {
					return err
				}
				n.mu.Lock()
				if n.delayers == nil {
					n.delayers = map[string]Impairment{}
				}
				n.delayers[name] = imp
				n.mu.Unlock()
			}
			for _, rule := range [][]string{
				{"-A", "POSTROUTING", "-o", "eth0", "-d", n.ObserverIP(), "-j", "ACCEPT"},
				{"-A", "POSTROUTING", "-o", "eth0", "-d", n.subnet + ".0/24", "-j", "NFQUEUE", "--queue-num", fmt.Sprint(delayerQueue), "--queue-bypass"},
			} {
				if err := iptables(h.NS, append([]string{"-t", "mangle"}, rule...)...); err != nil {
					return err
				}
			}
		}
		if imp.Loss > 0 {
			loss = append(loss, fmt.Sprintf("add rule bridge lossy links ip saddr %s ip daddr != %s numgen random mod 10000 < %d drop",
				h.IP, n.ObserverIP(), int(imp.Loss*10000+0.5)))
		}
	}
	if len(loss) == 0 {
		return nil
	}
	script := "add table bridge lossy\nadd chain bridge lossy links { type filter hook forward priority -10; }\n" + strings.Join(loss, "\n") + "\n"
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "ip", "netns", "exec", n.sw, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f (loss): %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Unimpair takes the impairment off the named hosts' links: their NFQUEUE
// rules and the switch's loss rules go (the delayers stay, idle, for the
// next Impair).
func (n *Net) Unimpair(hosts []string) error {
	var errs []error
	for _, name := range hosts {
		if h := n.Host(name); h != nil {
			errs = append(errs, iptables(h.NS, "-t", "mangle", "-F", "POSTROUTING"))
		}
	}
	if n.Silent {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", n.sw, "nft", "delete", "table", "bridge", "lossy").CombinedOutput()
		if err != nil && !strings.Contains(string(out), "No such file") {
			errs = append(errs, fmt.Errorf("nft delete table bridge lossy: %w: %s", err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// iptables runs iptables in namespace ns.
func iptables(ns string, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, "iptables"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// startDelayer starts the delayer in h's namespace and waits for its
// "ready" line. The process lives in the namespace, so Close kills it.
func (n *Net) startDelayer(ctx context.Context, exe string, h *Host, spec DelayerSpec) error {
	_, err := StartDelayer(ctx, h.Command(exe, "bench", DelayerVerb), spec)
	if err != nil {
		return fmt.Errorf("faults: delayer in %s: %w", h.Name, err)
	}
	return nil
}

// StartDelayer starts cmd, the binary re-executed with `bench`
// DelayerVerb in the namespace whose queued packets it is to hold, with
// spec, and waits for its "ready" line. The caller stops the process it
// returns (or removes its namespace).
func StartDelayer(ctx context.Context, cmd *exec.Cmd, spec DelayerSpec) (*os.Process, error) {
	b, _ := json.Marshal(spec)
	cmd.Stdin = strings.NewReader(string(b))
	var stderr strings.Builder
	cmd.Stderr = &syncWriter{w: &stderr}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start delayer: %w", err)
	}
	ready := watchReady(stdout, isReady)
	go func() { _ = cmd.Wait() }()
	select {
	case ok := <-ready:
		if !ok {
			return nil, fmt.Errorf("delayer exited: %s", strings.TrimSpace(stderr.String()))
		}
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		return nil, errors.New("delayer not ready after 10s")
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
	return cmd.Process, nil
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// openQueue is openNFQueue where netlink exists.
var openQueue = func(num uint16) (packetQueue, error) { return openNFQueueFor(num) }

// packetQueue is what the delayer needs of a netfilter queue.
type packetQueue interface {
	read(buf []byte, f func(id uint32)) error
	verdict(id uint32, accept bool) error
	Close() error
}

// quiet waits d (or until ctx ends), printing progress every 10 s.
func quiet(ctx context.Context, d time.Duration, log io.Writer) {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 || ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(left, 10*time.Second)):
		}
		if left > 10*time.Second {
			fmt.Fprintf(log, "  %v of %v\n", (d - time.Until(end)).Round(time.Second), d)
		}
	}
}

// roleLine matches a node's "replica role changed" log line.
var roleLine = regexp.MustCompile(`^time=(\S+) .*msg="replica role changed" .*service=(\S+) partition=(\d+) .*epoch=(\d+)`)

// countElections counts, over every partition, the epochs some node's
// replica entered between from and to that no replica had reached
// before from: each is an election (won or not) in the window.
func countElections(cl *Cluster, from, to time.Time) int {
	var lines []string
	for _, n := range cl.Nodes {
		b, err := os.ReadFile(n.LogPath)
		if err == nil {
			lines = append(lines, strings.Split(string(b), "\n")...)
		}
	}
	return electionsIn(lines, from, to)
}

// electionsIn is countElections over log lines.
func electionsIn(lines []string, from, to time.Time) int {
	before := map[string]uint64{}
	during := map[string]map[uint64]bool{}
	for _, l := range lines {
		m := roleLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		epoch, _ := strconv.ParseUint(m[4], 10, 64)
		part := m[2] + "/" + m[3]
		switch {
		case at.Before(from):
			before[part] = max(before[part], epoch)
		case !at.After(to):
			if during[part] == nil {
				during[part] = map[uint64]bool{}
			}
			during[part][epoch] = true
		}
	}
	n := 0
	for part, es := range during {
		for e := range es {
			if e > before[part] {
				n++
			}
		}
	}
	return n
}
