// Package faults is Neptune's Jepsen-style fault suite: three `neptune
// node` processes and the client processes that drive them each run in
// their own network namespace, joined by a bridge, so that nemeses can cut
// links silently (blackhole routes inside the namespaces), make them lossy,
// slow and reordering (lossy.go: an NFQUEUE delayer and nft loss, for a
// kernel without netem), pause and kill processes and tear the write log,
// while workloads record histories that
// internal/replica/check judges: lost, duplicated and divergent appends,
// non-linearizable register operations, reads beyond level 3's staleness
// bound and moments with two primaries. The test suite runs one short
// randomized schedule; `neptune bench faults` runs many long ones.
package faults

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// nsPrefix starts every namespace this package makes: nptf-<pid>-<run>-<host>.
// The creator's pid lets Sweep remove what dead runs left behind without
// touching a live parallel run.
const nsPrefix = "nptf-"

// Net is one run's namespaces: a switch namespace holding a bridge, a
// namespace per host attached to it by a veth pair, and a veth from the
// root namespace (the observer's address .1). The bridge lives in its own
// namespace so the root namespace's firewall (Docker's FORWARD DROP with
// br_netfilter, say) never sees the hosts' traffic. Nothing routes beyond
// the /24.
type Net struct {
	run    string // 6 hex digits
	subnet string // "10.a.b"
	sw     string // the switch namespace
	obs    string // the observer's veth in the root namespace
	// Silent is true when cuts are nftables drops in the switch (no
	// sender learns anything, as on a real network); false when nft is
	// missing and cuts are blackhole routes in the hosts (a sender's own
	// packets fail at once, so a cut is noticed faster than in reality).
	Silent bool

	mu    sync.Mutex
	hosts map[string]*Host
	order []string
	cuts  map[[2]string]bool
	// delayers are the hosts whose delayer runs, with its impairment.
	delayers map[string]Impairment
}

// Host is one namespace with one address.
type Host struct {
	Name, NS, IP string
	veth         string
}

// ip runs `ip args...` with a bounded time.
func ip(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Available reports why network namespaces cannot be made here (nil: they
// can): not root, no `ip`, or the kernel refuses.
func Available() error {
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("faults: no ip command (apt-get install iproute2): %w", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("faults: network namespaces need root")
	}
	name := fmt.Sprintf("%s%d-probe", nsPrefix, os.Getpid())
	if err := ip("netns", "add", name); err != nil {
		return fmt.Errorf("faults: cannot make a network namespace: %w", err)
	}
	return ip("netns", "del", name)
}

// NewNet sweeps what dead runs left, then makes the switch and picks a
// /24 under 10.0.0.0/8 that no route on this machine uses.
func NewNet() (*Net, error) {
	Sweep()
	var b [3]byte
	_, _ = rand.Read(b[:])
	n := &Net{run: hex.EncodeToString(b[:]), hosts: map[string]*Host{}, cuts: map[[2]string]bool{}}
	n.sw = fmt.Sprintf("%s%d-%s-sw", nsPrefix, os.Getpid(), n.run)
	n.obs = "nf" + n.run + "o"
	routes, _ := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	for range 50 {
		x, _ := rand.Int(rand.Reader, big.NewInt(50*256))
		subnet := fmt.Sprintf("10.%d.%d", 200+x.Int64()/256, x.Int64()%256)
		if !strings.Contains(string(routes), subnet+".") {
			n.subnet = subnet
			break
		}
	}
	if n.subnet == "" {
		return nil, errors.New("faults: no free 10.x.y.0/24")
	}
	if err := ip("netns", "add", n.sw); err != nil {
		return nil, err
	}
	for _, s := range [][]string{
		{"-n", n.sw, "link", "add", "br0", "type", "bridge"},
		{"-n", n.sw, "link", "set", "br0", "up"},
		{"link", "add", n.obs, "type", "veth", "peer", "name", "obs", "netns", n.sw},
		{"-n", n.sw, "link", "set", "obs", "master", "br0"},
		{"-n", n.sw, "link", "set", "obs", "up"},
		{"addr", "add", n.subnet + ".1/24", "dev", n.obs},
		{"link", "set", n.obs, "up"},
	} {
		if err := ip(s...); err != nil {
			n.Close()
			return nil, err
		}
	}
	if err := errors.Join(linkUp("", n.obs, false), linkUp(n.sw, "obs", true)); err != nil {
		n.Close()
		return nil, err
	}
	n.Silent = n.nft("add", "table", "bridge", "faults") == nil &&
		n.nft("add", "chain", "bridge", "faults", "cuts", "{ type filter hook forward priority 0; }") == nil
	return n, nil
}

// ObserverIP is the root namespace's address on the bridge: the runner
// samples and reads every node from there, on no side of any cut.
func (n *Net) ObserverIP() string { return n.subnet + ".1" }

// AddHost makes namespace name with the next address.
func (n *Net) AddHost(name string) (*Host, error) {
	n.mu.Lock()
	i := len(n.order)
	n.mu.Unlock()
	h := &Host{Name: name, NS: fmt.Sprintf("%s%d-%s-%s", nsPrefix, os.Getpid(), n.run, name), IP: fmt.Sprintf("%s.%d", n.subnet, 10+i),
		veth: fmt.Sprintf("h%d", i)}
	steps := [][]string{
		{"netns", "add", h.NS},
		{"-n", n.sw, "link", "add", h.veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"-n", n.sw, "link", "set", h.veth, "master", "br0"},
		{"-n", n.sw, "link", "set", h.veth, "up"},
		{"-n", h.NS, "link", "set", "lo", "up"},
		{"-n", h.NS, "addr", "add", h.IP + "/24", "dev", "eth0"},
		{"-n", h.NS, "link", "set", "eth0", "up"},
	}
	n.mu.Lock()
	n.hosts[name] = h
	n.order = append(n.order, name)
	n.mu.Unlock()
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return nil, err
		}
	}
	if err := errors.Join(linkUp(h.NS, "eth0", false), linkUp(n.sw, h.veth, true)); err != nil {
		return nil, err
	}
	return h, nil
}

// linkUp waits until dev in namespace ns (the root's if "") is
// operationally up and, for a bridge port, forwarding. `ip link set up`
// returns before the kernel has seen the veth's carrier: until its link
// watcher runs (batched, up to a second later, more on a loaded machine)
// the device keeps the qdisc that drops every packet, so a first SYN was
// lost and a dial with a shorter timeout than TCP's 1 s retransmission
// failed (seen in the suite, on a loaded machine).
func linkUp(ns, dev string, port bool) error {
	args := []string{"-d", "-o", "link", "show", "dev", dev}
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, err := exec.Command("ip", args...).Output()
		up := err == nil && strings.Contains(string(out), " state UP ") && (!port || strings.Contains(string(out), "bridge_slave state forwarding"))
		if up {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("faults: %s in %q not up after 10 s: %s", dev, ns, strings.TrimSpace(string(out)))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Host returns the named host.
func (n *Net) Host(name string) *Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hosts[name]
}

// Command is exe args run inside h's namespace (`ip netns exec` execs it,
// so the process is the command itself and signals reach it directly).
func (h *Host) Command(exe string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, exe}, args...)...)
}

// nft runs nft in the switch namespace.
func (n *Net) nft(args ...string) error {
	if _, err := exec.LookPath("nft"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.sw, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Cut drops every packet between a and b, both ways: silently in the
// switch when nft works (Silent), else with a blackhole route to the
// other's address in each host.
func (n *Net) Cut(a, b string) error { return n.CutPairs([][2]string{{a, b}}) }

// CutPairs cuts every pair; with nft, in one transaction, so the cut
// takes effect at one instant.
func (n *Net) CutPairs(pairs [][2]string) error {
	var rules []string
	var routes [][]string
	for _, pr := range pairs {
		a, b := pr[0], pr[1]
		ha, hb := n.Host(a), n.Host(b)
		if ha == nil || hb == nil || a == b {
			return fmt.Errorf("faults: cut %s-%s: no such hosts", a, b)
		}
		k := [2]string{min(a, b), max(a, b)}
		n.mu.Lock()
		done := n.cuts[k]
		n.cuts[k] = true
		n.mu.Unlock()
		if done {
			continue
		}
		for _, d := range [][2]*Host{{ha, hb}, {hb, ha}} {
			rules = append(rules, fmt.Sprintf("add rule bridge faults cuts ip saddr %s ip daddr %s drop", d[0].IP, d[1].IP))
			routes = append(routes, []string{"-n", d[0].NS, "route", "add", "blackhole", d[1].IP + "/32"})
		}
	}
	if len(rules) == 0 {
		return nil
	}
	if n.Silent {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ip", "netns", "exec", n.sw, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(strings.Join(rules, "\n") + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft -f: %w: %s", err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	for _, r := range routes {
		if err := ip(r...); err != nil {
			return err
		}
	}
	return nil
}

// Partition cuts every link between the groups (hosts in no group keep
// all their links), at one instant.
func (n *Net) Partition(groups ...[]string) error {
	var pairs [][2]string
	for i, g := range groups {
		for _, h := range groups[i+1:] {
			for _, a := range g {
				for _, b := range h {
					pairs = append(pairs, [2]string{a, b})
				}
			}
		}
	}
	return n.CutPairs(pairs)
}

// Heal removes every cut.
func (n *Net) Heal() error {
	n.mu.Lock()
	cuts := n.cuts
	n.cuts = map[[2]string]bool{}
	n.mu.Unlock()
	if n.Silent {
		if len(cuts) == 0 {
			return nil
		}
		return n.nft("flush", "chain", "bridge", "faults", "cuts")
	}
	var errs []error
	for k := range cuts {
		ha, hb := n.Host(k[0]), n.Host(k[1])
		errs = append(errs, ip("-n", ha.NS, "route", "del", "blackhole", hb.IP+"/32"),
			ip("-n", hb.NS, "route", "del", "blackhole", ha.IP+"/32"))
	}
	return errors.Join(errs...)
}

// Close kills whatever still runs in the namespaces and removes them and
// the switch (with the bridge and the observer's veth). Safe to call twice.
func (n *Net) Close() {
	n.mu.Lock()
	hosts := n.order
	n.order = nil
	n.mu.Unlock()
	for _, name := range hosts {
		removeNS(n.Host(name).NS)
	}
	removeNS(n.sw)
	_ = ip("link", "del", n.obs)
}

// removeNS SIGKILLs the namespace's processes and deletes it.
func removeNS(ns string) {
	if out, err := exec.Command("ip", "netns", "pids", ns).Output(); err == nil {
		for _, f := range strings.Fields(string(out)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGCONT)
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = ip("netns", "del", ns)
}

// Sweep removes namespaces (switches included) left by runs whose
// process is gone: an aborted test or benchmark.
func Sweep() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], nsPrefix) {
			continue
		}
		parts := strings.SplitN(strings.TrimPrefix(f[0], nsPrefix), "-", 3)
		pid, err := strconv.Atoi(parts[0])
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue // ours or alive
		}
		removeNS(f[0])
		if len(parts) >= 2 {
			_ = ip("link", "del", "nf"+parts[1]+"o")
		}
	}
}
