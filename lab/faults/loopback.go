package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Loopback is a network namespace with nothing but its own loopback: a
// benchmark re-executed inside it (Host.Command) runs its nodes and
// clients there as on the machine's loopback, and HoldReplies can slow
// some of their packets without touching the machine's own.
type Loopback struct{ Host }

// NewLoopback sweeps what dead runs left and makes the namespace.
func NewLoopback() (*Loopback, error) {
	Sweep()
	var b [3]byte
	_, _ = rand.Read(b[:])
	l := &Loopback{Host{Name: "lo", NS: fmt.Sprintf("%s%d-%s-lo", nsPrefix, os.Getpid(), hex.EncodeToString(b[:])), IP: "127.0.0.1"}}
	if err := ip("netns", "add", l.NS); err != nil {
		return nil, err
	}
	if err := ip("-n", l.NS, "link", "set", "lo", "up"); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Close kills what runs in the namespace and deletes it.
func (l *Loopback) Close() { removeNS(l.NS) }

// HoldReplies, run inside a Loopback, holds a share of the UDP packets
// sent from each of ports, each for imp's Delay ± Jitter: a delayer
// (exe re-executed with `bench` DelayerVerb) and, per port, an iptables
// rule that queues to it the packets the statistic match draws. It is
// the stand-in for replicas slow to answer polls (dissertation §3.4:
// 8.1% of polls took over 10 ms). The returned stop ends the delayer;
// the rules go with the namespace.
func HoldReplies(ctx context.Context, exe string, ports []int, share float64, imp Impairment, seed uint64) (stop func(), err error) {
	if err := imp.Validate(); err != nil {
		return nil, err
	}
	if !(share > 0 && share <= 1) {
		return nil, fmt.Errorf("faults: held share %v not in (0, 1]", share)
	}
	proc, err := StartDelayer(ctx, exec.CommandContext(ctx, exe, "bench", DelayerVerb), DelayerSpec{Queue: delayerQueue, Delay: imp.Delay, Jitter: imp.Jitter, Seed: seed})
	if err != nil {
		return nil, err
	}
	stop = func() { _ = proc.Kill() }
	for _, port := range ports {
		args := []string{"-t", "mangle", "-A", "OUTPUT", "-o", "lo", "-p", "udp", "--sport", strconv.Itoa(port),
			"-m", "statistic", "--mode", "random", "--probability", strconv.FormatFloat(share, 'f', 4, 64),
			"-j", "NFQUEUE", "--queue-num", strconv.Itoa(delayerQueue), "--queue-bypass"}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := exec.CommandContext(cctx, "iptables", args...).CombinedOutput()
		cancel()
		if err != nil {
			stop()
			return nil, fmt.Errorf("iptables %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return stop, nil
}
