// Package elasticbench runs replicated services on real node processes
// with automatic placement on (issue 17): nodes are killed for good or
// added, and the cluster restores every partition's degree and evens out
// replicas and primaries by itself. The process tests use it with the
// list-append workload and its checker (internal/replica/check); `neptune
// bench restore` measures the time to restore full degree versus the
// data a partition holds.
package elasticbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/internal/replica/wal"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// Config is a cluster.
type Config struct {
	// Exe is the neptune binary the nodes run; Dir holds their data.
	Exe, Dir string
	// Service is the replicated service (listappend or kv), with Parts
	// partitions of degree 3 at level 2, first placed on the first Nodes
	// nodes (e1, e2, ...).
	Service     string
	Nodes       int
	Parts       int
	Grace       time.Duration // placement.grace
	Interval    time.Duration // placement.interval
	MaxInFlight int
	// Log receives progress lines (nil: none).
	Log io.Writer
}

// Cluster is the node processes and a client.
type Cluster struct {
	cfg   Config
	yaml  string
	lc    *localcluster.Cluster
	Nodes []*localcluster.Node
	C     *client.Client
	start time.Time
}

// Start starts cfg.Nodes nodes and waits until every partition has a
// primary.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	var nodes []string
	for i := range cfg.Nodes {
		nodes = append(nodes, fmt.Sprintf("e%d", i+1))
	}
	cl := &Cluster{cfg: cfg, yaml: filepath.Join(cfg.Dir, "elastic.yaml"), lc: localcluster.New(cfg.Exe, cfg.Dir), start: time.Now()}
	yaml := fmt.Sprintf(`services:
  - name: %s
    partitions: 0-%d
    replication:
      level: 2
      nodes: [%s]
      degree: 3
placement:
  grace: %v
  interval: %v
  max_in_flight: %d
`, cfg.Service, cfg.Parts-1, joinComma(nodes), cfg.Grace, cfg.Interval, max(cfg.MaxInFlight, 1))
	if err := os.WriteFile(cl.yaml, []byte(yaml), 0o644); err != nil {
		return nil, err
	}
	for _, id := range nodes {
		if err := cl.AddNode(ctx, id); err != nil {
			cl.Close()
			return nil, err
		}
	}
	insecure, err := security.Load(security.Config{Insecure: true})
	if err != nil {
		cl.Close()
		return nil, err
	}
	if cl.C, err = client.New(ctx, client.Config{Client: config.Client{Join: cl.lc.Seeds(), AnnounceTTL: time.Second}, Material: insecure}); err != nil {
		cl.Close()
		return nil, err
	}
	if err := cl.WaitFor(ctx, 30*time.Second, "every partition has a primary", func(l Layout) bool {
		for p := range cfg.Parts {
			if l[p].Primary == "" {
				return false
			}
		}
		return true
	}); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

func joinComma(xs []string) string {
	out := ""
	for i, x := range xs {
		if i > 0 {
			out += ", "
		}
		out += x
	}
	return out
}

// AddNode starts node id hosting the service (on standby for partitions
// its replica sets do not name).
func (cl *Cluster) AddNode(ctx context.Context, id string) error {
	n, err := cl.lc.Start(ctx, localcluster.Spec{ID: id, Args: []string{"--config", cl.yaml, "--data-dir", filepath.Join(cl.cfg.Dir, id),
		"--announce-interval", "200ms", "--announce-ttl", "1s"}})
	if err != nil {
		return err
	}
	cl.Nodes = append(cl.Nodes, n)
	cl.Logf("started %s", id)
	return nil
}

// Kill SIGKILLs node id for good.
func (cl *Cluster) Kill(id string) error {
	i := slices.IndexFunc(cl.Nodes, func(n *localcluster.Node) bool { return n.Spec.ID == id })
	if i < 0 {
		return fmt.Errorf("elasticbench: no node %s", id)
	}
	if err := cl.Nodes[i].Kill(); err != nil {
		return err
	}
	cl.Nodes = slices.Delete(cl.Nodes, i, i+1)
	cl.Logf("killed %s", id)
	return nil
}

// Logf prints a progress line stamped with the time since Start.
func (cl *Cluster) Logf(format string, args ...any) {
	fmt.Fprintf(cl.cfg.Log, "t=%6.2fs %s\n", time.Since(cl.start).Seconds(), fmt.Sprintf(format, args...))
}

// Close stops the client and the nodes.
func (cl *Cluster) Close() {
	if cl.C != nil {
		cl.C.Close()
	}
	cl.lc.Close()
}

// Part is one partition as the yellow pages show it.
type Part struct {
	Primary string
	// Members is the primary's replica set; Learners those not caught up.
	Members, Learners []string
	// Versions is each announcing replica's executed version; Serving
	// those not recovering.
	Versions map[string]uint64
	Serving  map[string]bool
}

// Layout is every partition's Part.
type Layout map[int]Part

// Layout reads the client's yellow pages.
func (cl *Cluster) Layout() Layout {
	out := Layout{}
	epoch := map[int]uint64{}
	for _, e := range cl.C.Gossip().Snapshot() {
		for _, hs := range e.Ann.Services {
			if hs.Name != cl.cfg.Service {
				continue
			}
			for _, rs := range hs.Replicas {
				p := int(rs.Partition)
				pt := out[p]
				if pt.Versions == nil {
					pt.Versions, pt.Serving = map[string]uint64{}, map[string]bool{}
				}
				pt.Versions[e.Ann.NodeId] = rs.Version
				pt.Serving[e.Ann.NodeId] = rs.Role != 0 && !rs.Diverged
				if rs.Role == 2 && rs.Epoch >= epoch[p] {
					epoch[p] = rs.Epoch
					pt.Primary, pt.Members, pt.Learners = e.Ann.NodeId, nil, nil
					for _, m := range rs.Members {
						pt.Members = append(pt.Members, m.Id)
						if m.Learner {
							pt.Learners = append(pt.Learners, m.Id)
						}
					}
					slices.Sort(pt.Members)
				}
				out[p] = pt
			}
		}
	}
	return out
}

// Full reports whether partition p has exactly 3 members, all among
// live, none learning, all serving.
func (l Layout) Full(p int, live []string) bool {
	pt := l[p]
	if pt.Primary == "" || len(pt.Members) != 3 || len(pt.Learners) > 0 {
		return false
	}
	for _, m := range pt.Members {
		if !slices.Contains(live, m) || !pt.Serving[m] {
			return false
		}
	}
	return true
}

// Converged: Full, and every member executed the primary's version.
func (l Layout) Converged(p int, live []string) bool {
	pt := l[p]
	return l.Full(p, live) && !slices.ContainsFunc(pt.Members, func(m string) bool { return pt.Versions[m] != pt.Versions[pt.Primary] })
}

// Live lists the ids of the nodes running.
func (cl *Cluster) Live() []string {
	var out []string
	for _, n := range cl.Nodes {
		out = append(out, n.Spec.ID)
	}
	return out
}

// WaitFor polls the layout until ok holds (three reads in a row, 200 ms
// apart) or d passed.
func (cl *Cluster) WaitFor(ctx context.Context, d time.Duration, what string, ok func(Layout) bool) error {
	end := time.Now().Add(d)
	streak := 0
	for {
		if ok(cl.Layout()) {
			if streak++; streak == 3 {
				return nil
			}
		} else {
			streak = 0
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return fmt.Errorf("elasticbench: not within %v: %s; layout %+v", d, what, cl.Layout())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Stream is concurrent list appenders, each element appended once and
// retried while retryable.
type Stream struct {
	cl      *Cluster
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	appends []check.AppendOp
	acked   atomic.Int64
}

// Appenders starts n appenders over keys per partition.
func (cl *Cluster) Appenders(ctx context.Context, n, keys int) *Stream {
	s := &Stream{cl: cl, stop: make(chan struct{})}
	var next atomic.Uint64
	for w := range n {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			name := fmt.Sprintf("w%d", w)
			for {
				select {
				case <-s.stop:
					return
				default:
				}
				elem := next.Add(1)
				p := int(elem % uint64(cl.cfg.Parts))
				key := fmt.Sprintf("p%d-k%d", p, (int(elem)/cl.cfg.Parts)%keys)
				op := check.AppendOp{Key: key, Element: elem, Client: name, Start: time.Now()}
				op.Outcome = cl.appendOnce(ctx, p, key, elem)
				op.End = time.Now()
				if op.Outcome == check.AppendOK {
					s.acked.Add(1)
				}
				s.mu.Lock()
				s.appends = append(s.appends, op)
				s.mu.Unlock()
			}
		}()
	}
	return s
}

// Acked is how many appends were acknowledged so far.
func (s *Stream) Acked() int64 { return s.acked.Load() }

// Stop stops the appenders and returns the history.
func (s *Stream) Stop() []check.AppendOp {
	close(s.stop)
	s.wg.Wait()
	return s.appends
}

// appendOnce appends elem to key, retrying while the error is retryable
// (with the write's identity) for at most 20 s. The outcome is
// AppendFailed only if no attempt may have run.
func (cl *Cluster) appendOnce(ctx context.Context, p int, key string, elem uint64) check.AppendOutcome {
	body := listappend.EncodeAppend(key, elem)
	deadline := time.Now().Add(20 * time.Second)
	var err error
	maybeRan := false
	for attempt := 0; ctx.Err() == nil && time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			time.Sleep(10 * time.Millisecond)
		}
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = cl.C.Call(callCtx, listappend.Name, p, "append", body, client.WithRetryOf(err))
		cancel()
		if err == nil {
			return check.AppendOK
		}
		maybeRan = maybeRan || errors.Is(err, nerr.ErrUnknownOutcome)
		var remote *transport.RemoteError
		if errors.As(err, &remote) {
			if maybeRan {
				return check.AppendUnknown
			}
			return check.AppendFailed
		}
		if !nerr.Retryable(err) {
			break
		}
	}
	if maybeRan || err == nil {
		return check.AppendUnknown
	}
	return check.AppendFailed
}

// Check waits until every partition is at full degree on live nodes and
// converged, reads every key of appends from every member directly and
// judges the history.
func (cl *Cluster) Check(ctx context.Context, appends []check.AppendOp) (*check.ListReport, error) {
	live := cl.Live()
	if err := cl.WaitFor(ctx, 30*time.Second, "converged at full degree", func(l Layout) bool {
		for p := range cl.cfg.Parts {
			if !l.Converged(p, live) {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, err
	}
	keys := map[int][]string{}
	seen := map[string]bool{}
	for _, a := range appends {
		if !seen[a.Key] {
			seen[a.Key] = true
			var p int
			fmt.Sscanf(a.Key, "p%d-", &p)
			keys[p] = append(keys[p], a.Key)
		}
	}
	conns := transport.NewConns()
	defer conns.Close()
	addrs := map[string]string{}
	for _, e := range cl.C.Gossip().Snapshot() {
		addrs[e.Ann.NodeId] = e.Ann.RpcAddr
	}
	layout := cl.Layout()
	var finals []check.FinalList
	for p := range cl.cfg.Parts {
		for _, m := range layout[p].Members {
			rpc, err := conns.ClientFor(m, addrs[m])
			if err != nil {
				return nil, err
			}
			for _, k := range keys[p] {
				resp, err := rpc.Call(ctx, &pb.CallRequest{Service: listappend.Name, Partition: int32(p), Method: "read", Mode: pb.Mode_MODE_READ, Body: []byte(k)})
				if err != nil {
					return nil, fmt.Errorf("elasticbench: read %s at %s: %w", k, m, err)
				}
				list, err := listappend.DecodeList(resp.Body)
				if err != nil {
					return nil, err
				}
				finals = append(finals, check.FinalList{Partition: fmt.Sprint(p), Replica: m, Key: k, List: list})
			}
		}
	}
	return check.ListAppend(check.ListHistory{Appends: appends, Finals: finals})
}

// Spread is the most minus the fewest replicas, and primaries, per live
// node.
func (l Layout) Spread(live []string) (replicas, primaries int) {
	reps, prims := map[string]int{}, map[string]int{}
	for _, pt := range l {
		for _, m := range pt.Members {
			reps[m]++
		}
		prims[pt.Primary]++
	}
	span := func(c map[string]int) int {
		lo, hi := 1<<30, 0
		for _, n := range live {
			lo, hi = min(lo, c[n]), max(hi, c[n])
		}
		return hi - lo
	}
	return span(reps), span(prims)
}

// LogLength is how many entries partition p's write log holds at node.
// Call it after Close: it opens the log files.
func (cl *Cluster) LogLength(node string, p int) (int, error) {
	l, err := wal.Open(filepath.Join(cl.cfg.Dir, node, cl.cfg.Service, fmt.Sprint(p)), wal.Options{})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	if l.First() > l.Last() {
		return 0, nil
	}
	return int(l.Last()-l.First()) + 1, nil
}
