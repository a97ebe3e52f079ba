package node

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"google.golang.org/grpc"

	"github.com/neptune-cluster/neptune/internal/dashboard"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/internal/version"
)

// The debug bundle (issue 31, `neptune debug zip`): what an operator
// collects from every node in one command, over the operator-only Debug
// RPC (so a secured cluster needs an operator certificate, as for every
// other operator call).

// DebugItems are the items Debug serves, besides "dashboard/<view>".
var DebugItems = []string{"status", "config", "metrics", "logs", "goroutine", "heap", "cpu"}

// DebugLogBytes bounds the recent log lines a node keeps for its debug
// bundle.
const DebugLogBytes = 1 << 20

// Debug streams one item of the node's debug bundle.
func (s *nodeServer) Debug(in *pb.DebugRequest, stream grpc.ServerStreamingServer[pb.DebugChunk]) error {
	w := bufio.NewWriterSize(chunker(func(b []byte) error { return stream.Send(&pb.DebugChunk{Data: b}) }), backupChunk)
	err := s.n.debugItem(stream.Context(), in.Item, int(in.Seconds), w)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		return transport.ToStatus(err)
	}
	return nil
}

// debugItem writes item to w.
func (n *Node) debugItem(ctx context.Context, item string, seconds int, w io.Writer) error {
	switch {
	case item == "status":
		return writeJSON(w, n.debugStatus())
	case item == "config":
		return writeJSON(w, n.debugConfig())
	case item == "metrics":
		mfs, err := n.reg.Gatherer.Gather()
		if err != nil {
			return fmt.Errorf("neptune: gather metrics: %w", err)
		}
		enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeTextPlain))
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				return err
			}
		}
		return nil
	case item == "logs":
		_, err := w.Write(n.logs.Bytes())
		return err
	case item == "goroutine":
		return pprof.Lookup("goroutine").WriteTo(w, 2)
	case item == "heap":
		return pprof.Lookup("heap").WriteTo(w, 0)
	case item == "cpu":
		if seconds == 0 {
			seconds = 5
		}
		if seconds < 1 || seconds > 60 {
			return fmt.Errorf("neptune: debug cpu: seconds must be in 1..60, got %d", seconds)
		}
		if err := pprof.StartCPUProfile(w); err != nil {
			return fmt.Errorf("neptune: debug cpu: %w", err)
		}
		// A profile is of real time, whatever the node's clock.
		t := time.NewTimer(time.Duration(seconds) * time.Second)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		pprof.StopCPUProfile()
		return ctx.Err()
	case strings.HasPrefix(item, "dashboard/"):
		view := strings.TrimPrefix(item, "dashboard/")
		if !slices.Contains(dashboard.Views, view) {
			return fmt.Errorf("neptune: debug: no dashboard view %q (views: %s)", view, strings.Join(dashboard.Views, ", "))
		}
		dash, err := n.dashboard()
		if err != nil {
			return err
		}
		v, err := dash.View(ctx, view, dashboard.Filter{Partition: -1})
		if err != nil {
			return err
		}
		return writeJSON(w, v)
	}
	return fmt.Errorf("neptune: debug: no item %q (items: %s, dashboard/<view>)", item, strings.Join(DebugItems, ", "))
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// debugStatus is the node's own account of itself.
func (n *Node) debugStatus() any {
	type hostedService struct {
		Name       string  `json:"name"`
		Replicated bool    `json:"replicated"`
		Hosting    []int32 `json:"replicas_here,omitempty"`
	}
	st := struct {
		Node        string          `json:"node"`
		Cluster     string          `json:"cluster"`
		Release     string          `json:"release"`
		Commit      string          `json:"commit"`
		Go          string          `json:"go"`
		At          time.Time       `json:"at"`
		Uptime      string          `json:"uptime"`
		RPC         string          `json:"rpc,omitempty"`
		Gossip      string          `json:"gossip,omitempty"`
		Secured     bool            `json:"secured"`
		Goroutines  int             `json:"goroutines"`
		Inflight    int64           `json:"inflight_bytes"`
		StorageFull bool            `json:"storage_full,omitempty"`
		FreeBytes   uint64          `json:"storage_free_bytes,omitempty"`
		Services    []hostedService `json:"services"`
	}{Node: n.cfg.ID, Cluster: n.cfg.Cluster, Release: version.Release, Commit: version.Commit, Go: runtime.Version(),
		At: n.clock.Now().UTC(), Uptime: time.Since(n.startedAt).Round(time.Second).String(),
		Secured: !n.sec.Insecure(), Goroutines: runtime.NumGoroutine(), Inflight: n.inflight.Used()}
	if n.rpcLn != nil {
		st.RPC, st.Gossip = n.RPCAddr(), n.GossipAddr()
	}
	if n.repl != nil {
		st.StorageFull, st.FreeBytes = n.repl.StorageState()
	}
	n.mu.Lock()
	for name, h := range n.services {
		hs := hostedService{Name: name, Replicated: h.svc.Replication != nil}
		if hs.Replicated && n.repl != nil {
			hs.Hosting = n.repl.Hosting(name)
		}
		st.Services = append(st.Services, hs)
	}
	n.mu.Unlock()
	slices.SortFunc(st.Services, func(a, b hostedService) int { return strings.Compare(a.Name, b.Name) })
	return st
}

// debugConfig is the node's configuration without its secrets: the
// security material is named (directory, whether a keyring is used),
// never included.
func (n *Node) debugConfig() any {
	c := n.cfg
	sec := c.Security
	return map[string]any{
		"id": c.ID, "cluster": c.Cluster, "host": c.Host, "advertise": c.Advertise,
		"gossip_port": c.GossipPort, "rpc_port": c.RPCPort, "poll_port": c.PollPort,
		"metrics_addr": c.MetricsAddr, "zone": c.Zone, "pprof": c.Pprof, "join": c.Join,
		"join_timeout": c.JoinTimeout.String(), "announce_interval": c.AnnounceInterval.String(), "announce_ttl": c.AnnounceTTL.String(),
		"balance": c.Balance, "service_balance": c.ServiceBalance, "data_dir": c.DataDir,
		"max_message_bytes": c.MaxMessageBytes, "max_inflight_bytes": c.MaxInflightBytes,
		"max_aggregate_deadline": c.MaxAggregateDeadline.String(), "max_aggregate_participants": c.MaxAggregateParticipants,
		"drain_timeout": c.DrainTimeout.String(), "placement": c.Placement,
		"disk_reserve": c.Storage.Reserve, "rebuild_corrupt": c.Storage.RebuildCorrupt,
		"security": map[string]any{
			"insecure": sec.Insecure, "dir": sec.Dir, "keyring": redacted(sec.KeyringFile != ""),
			"certificate": redacted(sec.Cert != ""), "label": sec.Cluster,
		},
	}
}

// redacted marks a secret that is set.
func redacted(set bool) string {
	if set {
		return "[redacted]"
	}
	return ""
}

// logRing keeps the most recent log lines, at most max bytes of them.
type logRing struct {
	mu    sync.Mutex
	lines [][]byte
	size  int
	max   int
}

func newLogRing(max int) *logRing { return &logRing{max: max} }

// Write takes one line (slog's text handler writes each record whole).
func (r *logRing) Write(b []byte) (int, error) {
	line := slices.Clone(b)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, line)
	r.size += len(line)
	for r.size > r.max && len(r.lines) > 0 {
		r.size -= len(r.lines[0])
		r.lines[0] = nil
		r.lines = r.lines[1:]
	}
	return len(b), nil
}

// Bytes is the kept lines, oldest first.
func (r *logRing) Bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Concat(r.lines...)
}

// teeHandler sends each record to both handlers (the node's logger and
// its ring of recent lines).
type teeHandler struct{ a, b slog.Handler }

func (t teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return t.a.Enabled(ctx, l) || t.b.Enabled(ctx, l)
}

func (t teeHandler) Handle(ctx context.Context, r slog.Record) error {
	var errA, errB error
	if t.a.Enabled(ctx, r.Level) {
		errA = t.a.Handle(ctx, r.Clone())
	}
	if t.b.Enabled(ctx, r.Level) {
		errB = t.b.Handle(ctx, r)
	}
	return errors.Join(errA, errB)
}

func (t teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{t.a.WithAttrs(as), t.b.WithAttrs(as)}
}

func (t teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{t.a.WithGroup(name), t.b.WithGroup(name)}
}
