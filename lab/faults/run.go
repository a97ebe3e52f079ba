package faults

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/internal/replica/check"
)

// Config is one schedule's run.
type Config struct {
	// Exe is the neptune binary (nodes run `neptune node`, clients the
	// hidden verb ClientArgs); Dir holds data, logs and histories.
	Exe, Dir string
	// ClientArgs start a client process (default: bench faults-client).
	ClientArgs []string
	Seed       uint64
	// Steps and Budget bound the schedule; Hold is the typical nemesis hold.
	Steps        int
	Budget, Hold time.Duration
	Lease        time.Duration
	Level, Parts int
	Keys         int
	Staleness    time.Duration
	// Appenders and Registers are workers per client process (two
	// processes); MaxOps bounds each process's operations (0: none).
	Appenders, Registers, Readers, MaxOps int
	Log                                   io.Writer
	// NodeExe, if set, is the binary the nodes run (clients still run
	// Exe): how a throughput run compares an older build's nodes.
	NodeExe string
	// Quiet, if positive, runs no nemesis: the workload runs for Quiet,
	// and Result.Throughput counts what was acknowledged in it.
	Quiet time.Duration
	// Lossy, if not zero, impairs every node's links to the other hosts
	// (Net.Impair) once the cluster is up, for the whole run.
	Lossy Impairment
	// Unreplicated runs one node with both services unreplicated (Level
	// is then ignored); WritesOnly runs only the appenders.
	Unreplicated, WritesOnly bool
}

func (c *Config) defaults() {
	if c.ClientArgs == nil {
		c.ClientArgs = []string{"bench", ClientVerb}
	}
	c.Steps = max(c.Steps, 1)
	if c.Budget == 0 {
		c.Budget = time.Minute
	}
	if c.Hold == 0 {
		c.Hold = 3 * time.Second
	}
	if c.Lease == 0 {
		c.Lease = 400 * time.Millisecond // the replica core's default
	}
	c.Level = max(c.Level, 2)
	c.Parts = max(c.Parts, 2)
	c.Keys = max(c.Keys, 4)
	if c.Staleness == 0 {
		c.Staleness = time.Second
	}
	if c.Appenders == 0 {
		c.Appenders = 4
	}
	if c.Registers == 0 {
		c.Registers = 4
	}
	if c.Readers == 0 {
		c.Readers = 2
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.WritesOnly {
		c.Registers, c.Readers = 0, 0
	}
}

// Event is a nemesis as it was applied.
type Event struct {
	Step
	Target        string
	Start, Healed time.Time
	// Affected are the partitions ("svc/p") whose primary the target was
	// at the start; Clients the clients whose acks show writes resuming.
	Affected []string
	Clients  []string
	Note     string
}

// Result is one schedule's findings.
type Result struct {
	Seed         uint64
	Events       []Event
	Linearizable bool
	LeaseSet     bool
	SilentCuts   bool
	// Ops is every recorded operation; Acked those acknowledged (writes)
	// or answered (reads).
	Ops, Acked int
	List       *check.ListReport
	Register   *check.RegisterReport
	// Stale are level-3 reads beyond the bound; MaxBeyond the worst.
	Stale     []check.Violation
	MaxBeyond time.Duration
	Sessions  []check.Violation
	// Collisions are two acknowledged writes with one LSN; Order writes
	// acknowledged at a lower LSN than one acknowledged before they started.
	Collisions, Order []check.Violation
	Primaries         check.PrimaryMoments
	// KVDivergent counts kv partitions whose replicas' digests differ.
	KVDivergent int
	Converged   bool
	ConvergeErr string
	// Resume (isolation, split, pause) and Failover (kill, torn WAL) are
	// the times from the fault to the first acknowledged write of an
	// affected partition; NoResume counts faults after which none came.
	Resume, Failover []time.Duration
	NoResume         int
	// ResumeBy is Resume by kind of fault.
	ResumeBy map[Kind][]time.Duration
	// Throughput is what a Quiet run acknowledged in its window.
	Throughput Throughput
	// Elections counts, in a Quiet run's window, the epochs some replica
	// entered (each election, won or not, starts one), over every
	// partition, from the nodes' logs.
	Elections int
	// Settle is, per fault, the time from its end until every client's
	// yellow pages showed exactly one primary for every partition;
	// Unsettled counts faults after which some client's had not settled
	// by the next fault (or the end).
	Settle    []time.Duration
	Unsettled int
}

// Run runs one seeded schedule on a fresh cluster in fresh namespaces and
// checks its history. Namespaces and processes are removed before it
// returns, also on error.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	cfg.defaults()
	net, err := NewNet()
	if err != nil {
		return nil, err
	}
	defer net.Close()
	nodeExe := cfg.Exe
	if cfg.NodeExe != "" {
		nodeExe = cfg.NodeExe
	}
	// A throughput run compares kv at plain level 3 (a baseline binary
	// may have no linearizable level).
	level := cfg.Level
	if cfg.Unreplicated {
		level = 0
	}
	cl, err := StartCluster(ctx, net, nodeExe, cfg.Dir, level, cfg.Parts, cfg.Staleness, cfg.Lease, cfg.Quiet <= 0, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	cl.labExe = cfg.Exe
	if cfg.Lossy != (Impairment{}) {
		var ids []string
		for _, n := range cl.Nodes {
			ids = append(ids, n.ID)
		}
		if err := net.Impair(ctx, cfg.Exe, ids, cfg.Lossy, cfg.Seed); err != nil {
			return nil, err
		}
		fmt.Fprintf(cfg.Log, "links impaired: %s on the egress of %v\n", cfg.Lossy, ids)
	}
	res = &Result{Seed: cfg.Seed, Linearizable: cl.Linearizable, LeaseSet: cl.LeaseSet, SilentCuts: net.Silent}
	var steps []Step
	if cfg.Quiet <= 0 {
		steps = Generate(cfg.Seed, cfg.Steps, cfg.Budget, cfg.Hold, cfg.Lease, cfg.Parts)
	}
	how := "silent drops in the switch (nft)"
	if !net.Silent {
		how = "blackhole routes (no nft: senders see their own packets fail)"
	}
	fmt.Fprintf(cfg.Log, "schedule seed %d: %d steps on %s.0/24, cuts are %s\n", cfg.Seed, len(steps), net.subnet, how)

	// The observer samples every node's claim every 100 ms.
	var samples []check.StatusSample
	sampleDone := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampleDone)
		for round := 0; round < 100000; round++ {
			select {
			case <-stopSampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var mu sync.Mutex
			var wg sync.WaitGroup
			for _, svc := range Services {
				for p := range cfg.Parts {
					wg.Add(1)
					go func() {
						defer wg.Done()
						at := time.Now()
						for _, a := range cl.Poll(ctx, svc, p) {
							if a.OK {
								mu.Lock()
								samples = append(samples, check.StatusSample{Round: round, At: at, Node: a.Node, Partition: fmt.Sprintf("%s/%d", svc, p), Primary: a.Primary,
									LeaseKnown: true, LeaseValid: a.Lease > 0})
								mu.Unlock()
							}
						}
					}()
				}
			}
			wg.Wait()
		}
	}()
	defer func() {
		select {
		case <-stopSampling:
		default:
			close(stopSampling)
		}
		<-sampleDone
	}()

	clients, err := startClients(ctx, net, cl, cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range clients {
			c.stop()
		}
	}()
	time.Sleep(time.Second)
	begin := time.Now()
	for i, s := range steps {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		ev, err := apply(ctx, cl, s)
		if err != nil {
			return nil, fmt.Errorf("faults: step %d %s: %w", i, s, err)
		}
		fmt.Fprintf(cfg.Log, "  t=%v step %d/%d %s on %s (primary of %v)%s\n", ev.Start.Sub(begin).Round(time.Millisecond), i+1, len(steps), s, ev.Target, ev.Affected, note(ev.Note))
		res.Events = append(res.Events, ev)
		time.Sleep(s.Rest)
	}
	if cfg.Quiet > 0 {
		quiet(ctx, cfg.Quiet, cfg.Log)
		res.Throughput.From, res.Throughput.To = begin, time.Now()
		res.Elections = countElections(cl, begin, res.Throughput.To)
	}
	if err := net.Heal(); err != nil {
		return nil, err
	}
	if cfg.Lossy != (Impairment{}) {
		// The checks read every replica: over clean links, as after a cut.
		var ids []string
		for _, n := range cl.Nodes {
			ids = append(ids, n.ID)
		}
		if err := net.Unimpair(ids); err != nil {
			return nil, err
		}
	}
	time.Sleep(2 * time.Second)
	var recs []Record
	for _, c := range clients {
		rs, err := c.finish()
		if err != nil {
			return nil, err
		}
		recs = append(recs, rs...)
	}
	close(stopSampling)
	<-sampleDone
	if err := cl.WaitConverged(ctx, 60*time.Second); err != nil {
		res.ConvergeErr = err.Error()
		fmt.Fprintf(cfg.Log, "  %v\n", err)
	} else {
		res.Converged = true
	}
	if err := res.check(ctx, cl, cfg, recs, samples); err != nil {
		return nil, err
	}
	if b, err := json.MarshalIndent(res, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(cfg.Dir, "result.json"), b, 0o644)
	}
	return res, nil
}

func note(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// apply runs one step: fault, hold, heal.
func apply(ctx context.Context, cl *Cluster, s Step) (Event, error) {
	ev := Event{Step: s}
	target := ""
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if target = cl.Primary(ctx, s.Service, s.Partition); target != "" {
			break
		}
	}
	if target == "" || s.Kind == Split || s.Kind == TornWAL {
		target = cl.Nodes[s.Pick%len(cl.Nodes)].ID
	}
	ev.Target = target
	for _, svc := range Services {
		for p := range cl.Parts {
			if cl.Primary(ctx, svc, p) == target {
				ev.Affected = append(ev.Affected, fmt.Sprintf("%s/%d", svc, p))
			}
		}
	}
	var others []string
	for _, n := range cl.Nodes {
		if n.ID != target {
			others = append(others, n.ID)
		}
	}
	n := cl.Node(target)
	// Start is when the fault is in place (set in each case).
	switch s.Kind {
	case IsolatePrimary, Split:
		ev.Clients = []string{"c2"}
		if err := cl.Net.Partition([]string{target, "c1"}, append(others, "c2")); err != nil {
			return ev, err
		}
		ev.Start = time.Now()
		time.Sleep(s.Hold)
		if err := cl.Net.Heal(); err != nil {
			return ev, err
		}
	case Bridge:
		// target–others[0] and others[0]–others[1] stay up.
		a, c := target, others[1]
		ev.Affected = nil
		if err := cl.Net.CutPairs([][2]string{{a, c}, {"c1", c}, {"c2", a}}); err != nil {
			return ev, err
		}
		ev.Start = time.Now()
		ev.Note = fmt.Sprintf("%s–%s cut, %s–%s–%s up", a, c, a, others[0], c)
		time.Sleep(s.Hold)
		if err := cl.Net.Heal(); err != nil {
			return ev, err
		}
	case Pause:
		ev.Clients = []string{"c1", "c2"}
		if err := n.Signal(syscall.SIGSTOP); err != nil {
			return ev, err
		}
		ev.Start = time.Now()
		time.Sleep(s.Hold)
		if err := n.Signal(syscall.SIGCONT); err != nil {
			return ev, err
		}
	case Lossy:
		ev.Affected = nil // nothing fails: no resume to time
		ids := make([]string, len(cl.Nodes))
		for i, n := range cl.Nodes {
			ids[i] = n.ID
		}
		link := SuiteLink
		if !cl.Net.Silent {
			link.Loss = 0 // (loss needs nft)
		}
		if err := cl.Net.Impair(ctx, cl.labExe, ids, link, uint64(s.Pick)); err != nil {
			return ev, err
		}
		ev.Start = time.Now()
		time.Sleep(s.Hold)
		if err := cl.Net.Unimpair(ids); err != nil {
			return ev, err
		}
		ev.Note = fmt.Sprintf("%s; %d elections meanwhile", link, countElections(cl, ev.Start, time.Now()))
	case Kill, TornWAL:
		ev.Clients = []string{"c1", "c2"}
		if err := n.Signal(syscall.SIGKILL); err != nil {
			return ev, err
		}
		ev.Start = time.Now()
		if s.Kind == TornWAL {
			what, err := TearWAL(n, int64(1+s.Pick%64), s.Pick%2 == 0)
			if err != nil {
				return ev, err
			}
			ev.Note = what
		}
		time.Sleep(s.Hold)
		if err := cl.Restart(ctx, n); err != nil {
			if s.Kind != TornWAL {
				return ev, err
			}
			// A node that refuses its damaged log must say why; it then
			// rejoins with an empty data directory and recovers.
			ev.Note += "; restart refused: " + firstLine(err.Error(), n)
			if err := os.RemoveAll(n.DataDir); err != nil {
				return ev, err
			}
			if err := cl.Restart(ctx, n); err != nil {
				return ev, err
			}
			ev.Note += "; restarted empty"
		} else if s.Kind == TornWAL {
			ev.Note += "; restarted"
		}
	case CutClients:
		// Nothing measures resumption: the clients reach no node.
		ev.Affected = nil
		if err := cl.Net.Partition([]string{"c1", "c2"}, nodeIDs(cl)); err != nil {
			return ev, err
		}
		ev.Start = time.Now()
		ev.Note = "every client cut off from every node"
		time.Sleep(s.Hold)
		if err := cl.Net.Heal(); err != nil {
			return ev, err
		}
	case CrashAll:
		ev.Affected = nil
		for _, m := range cl.Nodes {
			if err := m.Signal(syscall.SIGKILL); err != nil {
				return ev, err
			}
		}
		ev.Start = time.Now()
		ev.Note = "every node SIGKILLed"
		time.Sleep(s.Hold)
		for _, m := range cl.Nodes {
			if err := cl.Restart(ctx, m); err != nil {
				return ev, err
			}
		}
		ev.Note += "; all restarted"
	}
	ev.Healed = time.Now()
	return ev, nil
}

// nodeIDs are the cluster's node ids.
func nodeIDs(cl *Cluster) []string {
	ids := make([]string, len(cl.Nodes))
	for i, n := range cl.Nodes {
		ids[i] = n.ID
	}
	return ids
}

// firstLine is the last error-looking line of a failed start's log.
func firstLine(err string, n *Node) string {
	tail, _ := os.ReadFile(n.LogPath)
	lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(strings.ToLower(lines[i]), "error") {
			return strings.TrimSpace(lines[i])
		}
	}
	return strings.SplitN(err, "\n", 2)[0]
}

// proc is a running client process.
type proc struct {
	name, out string
	cmd       *exec.Cmd
	exited    chan error
	once      sync.Once
}

// startClients starts c1 and c2, each in its own namespace, and waits
// until both see the services.
func startClients(ctx context.Context, net *Net, cl *Cluster, cfg Config) ([]*proc, error) {
	var join []string
	for _, n := range cl.Nodes {
		join = append(join, n.Host.IP+":"+gossipPort)
	}
	var ps []*proc
	for i, name := range []string{"c1", "c2"} {
		h, err := net.AddHost(name)
		if err != nil {
			return ps, err
		}
		spec := ClientSpec{Name: name, IP: h.IP, Join: join, Out: filepath.Join(cfg.Dir, name+".jsonl"), Parts: cfg.Parts, Keys: cfg.Keys,
			Appenders: cfg.Appenders, Registers: cfg.Registers, Readers: cfg.Readers, ElemBase: uint64(i+1) << 48, MaxOps: cfg.MaxOps,
			Duration: cfg.Budget + cfg.Quiet + 2*time.Minute, Seed: cfg.Seed*2 + uint64(i), Unreplicated: cfg.Unreplicated}
		b, _ := json.Marshal(spec)
		p := &proc{name: name, out: spec.Out, exited: make(chan error, 1)}
		p.cmd = h.Command(cfg.Exe, cfg.ClientArgs...)
		p.cmd.Stdin = strings.NewReader(string(b))
		logf, err := os.Create(filepath.Join(cfg.Dir, name+".log"))
		if err != nil {
			return ps, err
		}
		p.cmd.Stderr = logf
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			return ps, err
		}
		if err := p.cmd.Start(); err != nil {
			return ps, fmt.Errorf("faults: start client %s: %w", name, err)
		}
		ready := watchReady(stdout, isReady)
		go func() { p.exited <- p.cmd.Wait(); logf.Close() }()
		ps = append(ps, p)
		select {
		case ok := <-ready:
			if !ok {
				tail, _ := os.ReadFile(filepath.Join(cfg.Dir, name+".log"))
				return ps, fmt.Errorf("faults: client %s exited before ready: %s", name, lastLines(string(tail), 10))
			}
		case <-time.After(30 * time.Second):
			return ps, fmt.Errorf("faults: client %s not ready after 30s", name)
		case <-ctx.Done():
			return ps, ctx.Err()
		}
	}
	return ps, nil
}

// stop kills the process if it still runs.
func (p *proc) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
}

// finish asks the client to stop (SIGTERM: in-flight operations finish
// within their retry bound) and reads its history.
func (p *proc) finish() ([]Record, error) {
	var werr error
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case werr = <-p.exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			werr = errors.Join(errors.New("did not stop in 30s"), <-p.exited)
		}
	})
	if werr != nil {
		return nil, fmt.Errorf("faults: client %s: %w", p.name, werr)
	}
	f, err := os.Open(p.out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Record
	dec := json.NewDecoder(f)
	for {
		var r Record
		if err := dec.Decode(&r); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("faults: client %s history: %w", p.name, err)
		}
		out = append(out, r)
	}
}

// check runs every checker over the history and the final state.
func (res *Result) check(ctx context.Context, cl *Cluster, cfg Config, recs []Record, samples []check.StatusSample) error {
	var views []Record
	recs = slices.DeleteFunc(recs, func(r Record) bool {
		if r.W == viewSample {
			views = append(views, r)
		}
		return r.W == viewSample
	})
	res.Settle, res.Unsettled = settle(res.Events, views)
	res.Ops = len(recs)
	outcome := map[string]check.AppendOutcome{"ok": check.AppendOK, "failed": check.AppendFailed, "unknown": check.AppendUnknown}
	var appends []check.AppendOp
	var regs []check.RegisterOp
	var kvOps, acks []check.Op
	keys := map[int][]string{}
	seenKey := map[string]bool{}
	for _, r := range recs {
		if r.O == "ok" {
			res.Acked++
		}
		s, f := time.Unix(0, r.S), time.Unix(0, r.F)
		res.Throughput.count(r, f)
		part := fmt.Sprintf("%d", r.P)
		switch r.W {
		case "append":
			appends = append(appends, check.AppendOp{Key: r.K, Element: r.E, Outcome: outcome[r.O], Client: r.C, Start: s, End: f})
			if !seenKey[r.K] {
				seenKey[r.K] = true
				keys[r.P] = append(keys[r.P], r.K)
			}
			if r.O == "ok" {
				acks = append(acks, check.Op{Session: fmt.Sprint(r.E), Kind: check.Write, Partition: listappend.Name + "/" + part, Version: r.L, Start: s, End: f})
			}
		case "put", "get":
			regs = append(regs, check.RegisterOp{Key: r.K, Put: r.W == "put", Value: r.V, Outcome: outcome[r.O], Start: s, End: f, Client: r.C})
			if r.O != "ok" || r.L == 0 {
				continue
			}
			kind := check.Read
			if r.W == "put" {
				kind = check.Write
				acks = append(acks, check.Op{Session: r.V, Kind: check.Write, Partition: "kv/" + part, Version: r.L, Start: s, End: f})
			}
			kvOps = append(kvOps, check.Op{Session: r.C, Kind: kind, Partition: "kv/" + part, Version: r.L, Start: s, End: f})
		}
	}
	var finals []check.FinalList
	if res.Converged {
		for _, n := range cl.Nodes {
			for p := range cfg.Parts {
				for _, k := range keys[p] {
					body, err := cl.Read(ctx, n, listappend.Name, p, "read", []byte(k))
					if err != nil {
						return err
					}
					list, err := listappend.DecodeList(body)
					if err != nil {
						return err
					}
					finals = append(finals, check.FinalList{Partition: fmt.Sprint(p), Replica: n.ID, Key: k, List: list})
				}
			}
		}
		for p := range cfg.Parts {
			digests := map[string]string{}
			for _, n := range cl.Nodes {
				d, err := cl.Read(ctx, n, "kv", p, "digest", nil)
				if err != nil {
					return err
				}
				digests[n.ID] = string(d)
			}
			if len(check.Convergence(digests)) > 0 {
				res.KVDivergent++
			}
		}
	}
	var err error
	if res.List, err = check.ListAppend(check.ListHistory{Appends: appends, Finals: finals}); err != nil {
		return err
	}
	res.Register = check.Register(regs, 10*time.Second)
	res.Stale = check.StaleBeyondBound(kvOps, cfg.Staleness)
	res.MaxBeyond = check.MaxBeyond(kvOps, cfg.Staleness)
	res.Sessions = check.Sessions(kvOps)
	res.Collisions = check.LSNCollisions(acks)
	res.Order = check.LSNOrder(acks)
	res.Primaries = check.TwoPrimaries(samples)
	// Time to the first acknowledged write of an affected partition that
	// a listed client started after the fault.
	for _, ev := range res.Events {
		if len(ev.Affected) == 0 || len(ev.Clients) == 0 {
			continue
		}
		first := time.Duration(-1)
		for _, r := range recs {
			client, _, _ := strings.Cut(r.C, "-")
			svc := "kv"
			if r.W == "append" {
				svc = listappend.Name
			}
			if r.O != "ok" || r.W == "get" || time.Unix(0, r.S).Before(ev.Start) || !slices.Contains(ev.Clients, client) ||
				!slices.Contains(ev.Affected, fmt.Sprintf("%s/%d", svc, r.P)) {
				continue
			}
			if d := time.Unix(0, r.F).Sub(ev.Start); first < 0 || d < first {
				first = d
			}
		}
		if first < 0 {
			res.NoResume++
			continue
		}
		switch ev.Kind {
		case Kill, TornWAL:
			res.Failover = append(res.Failover, first)
		default:
			res.Resume = append(res.Resume, first)
			if res.ResumeBy == nil {
				res.ResumeBy = map[Kind][]time.Duration{}
			}
			res.ResumeBy[ev.Kind] = append(res.ResumeBy[ev.Kind], first)
		}
	}
	return nil
}

// settle measures, for each fault, how long after it ended every client's
// yellow pages took to show exactly one primary for every partition, and
// keep showing it for stableFor (issue 14: one primary announced within 2 s
// of a heal). A fault's window runs from its end to the next fault's
// start; a client without such a stable stretch of some partition in the
// window counts the fault as unsettled. A leadership transfer later in the
// window (the preferred replica taking its role back once it caught up)
// is a planned change of primary, not the heal settling, and the brief
// moment a view may show both sides of it is not counted.
func settle(events []Event, views []Record) (ds []time.Duration, unsettled int) {
	for i, ev := range events {
		end := time.Unix(1<<62, 0)
		if i+1 < len(events) {
			end = events[i+1].Start
		}
		type key struct{ client, part string }
		seqs := map[key][]Record{}
		for _, v := range views {
			if at := time.Unix(0, v.S); !at.Before(ev.Healed) && at.Before(end) {
				k := key{v.C, fmt.Sprintf("%s/%d", v.K, v.P)}
				seqs[k] = append(seqs[k], v)
			}
		}
		if len(seqs) == 0 {
			continue // no client sampled this window
		}
		worst, open := time.Duration(0), false
		for _, seq := range seqs {
			slices.SortFunc(seq, func(a, b Record) int { return cmp.Compare(a.S, b.S) })
			from := int64(-1) // start of the current run of one-primary views
			settled := false
			for _, v := range seq {
				if v.V == "" || strings.Contains(v.V, ",") {
					from = -1
					continue
				}
				if from < 0 {
					from = v.S
				}
				if time.Duration(v.S-from) >= stableFor {
					worst, settled = max(worst, time.Unix(0, from).Sub(ev.Healed)), true
					break
				}
			}
			open = open || !settled
		}
		if open {
			unsettled++
			continue
		}
		ds = append(ds, worst)
	}
	return ds, unsettled
}

// stableFor is how long a view must show one primary to count as settled.
const stableFor = 500 * time.Millisecond

// Throughput counts the operations a quiet run acknowledged between From
// and To: list appends (the list-append service's level) and kv
// operations (level 3: puts and gets).
type Throughput struct {
	From, To       time.Time
	Appends, KVOps int
}

func (t *Throughput) count(r Record, end time.Time) {
	if r.O != "ok" || t.From.IsZero() || end.Before(t.From) || end.After(t.To) {
		return
	}
	if r.W == "append" {
		t.Appends++
	} else {
		t.KVOps++
	}
}

// PerSecond is appends/s and kv operations/s.
func (t Throughput) PerSecond() (appends, kvOps float64) {
	d := t.To.Sub(t.From).Seconds()
	if d <= 0 {
		return 0, 0
	}
	return float64(t.Appends) / d, float64(t.KVOps) / d
}
