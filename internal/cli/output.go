package cli

import (
	"encoding/json"
	"io"
	"time"

	"github.com/spf13/pflag"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/gateway"
)

// Machine-readable output (issue 31): -o json on the commands that
// report state prints one JSON document (status) or one JSON object per
// line (a partition change's steps) instead of tables, with snake_case
// names and durations in milliseconds.

// outputFlag is a command's -o/--output.
type outputFlag string

func (o *outputFlag) add(fs *pflag.FlagSet) {
	*o = "text"
	fs.VarP(o, "output", "o", "output `format`: text or json")
}

func (o *outputFlag) String() string { return string(*o) }
func (o *outputFlag) Type() string   { return "format" }
func (o *outputFlag) Set(s string) error {
	if s != "text" && s != "json" {
		return Usagef("--output must be text or json, got %q", s)
	}
	*o = outputFlag(s)
	return nil
}

func (o outputFlag) json() bool { return o == "json" }

// printJSON writes v as one line of JSON.
func printJSON(w io.Writer, v any) error { return json.NewEncoder(w).Encode(v) }

// statusJSON is `neptune status -o json`.
type statusJSON struct {
	Members    []memberJSON    `json:"members"`
	Partitions []partitionJSON `json:"partitions"`
	Gateways   []gatewayJSON   `json:"gateways,omitempty"`
}

type memberJSON struct {
	Node        string        `json:"node"`
	RPCAddr     string        `json:"rpc_addr"`
	PollAddr    string        `json:"poll_addr"`
	MetricsAddr string        `json:"metrics_addr,omitempty"`
	Zone        string        `json:"zone,omitempty"`
	AgeMs       int64         `json:"age_ms"`
	Services    []serviceJSON `json:"services"`
}

type serviceJSON struct {
	Name       string `json:"name"`
	Partitions []int  `json:"partitions"`
	// Load is the polled load per partition, -1 if its poll was late.
	Load []int `json:"load"`
}

type partitionJSON struct {
	Service      string        `json:"service"`
	Partition    int           `json:"partition"`
	Level        int           `json:"level"`
	Linearizable bool          `json:"linearizable"`
	Primary      string        `json:"primary"`
	Replicas     []replicaJSON `json:"replicas"`
}

type replicaJSON struct {
	Node     string `json:"node"`
	Role     string `json:"role"`
	Epoch    uint64 `json:"epoch"`
	Primary  string `json:"primary,omitempty"`
	Version  uint64 `json:"version"`
	Commit   uint64 `json:"commit"`
	Last     uint64 `json:"last"`
	LeaseMs  int64  `json:"lease_ms"`
	Diverged bool   `json:"diverged,omitempty"`
	Stale    string `json:"stale,omitempty"`
}

type gatewayJSON struct {
	Gateway     string                     `json:"gateway"`
	Subscribers []gateway.SubscriberStatus `json:"subscribers"`
}

func membersJSON(ms []neptune.Member) []memberJSON {
	out := []memberJSON{}
	for _, m := range ms {
		mj := memberJSON{Node: m.Node, RPCAddr: m.RPCAddr, PollAddr: m.PollAddr, MetricsAddr: m.MetricsAddr, Zone: m.Zone,
			AgeMs: m.Age.Milliseconds(), Services: []serviceJSON{}}
		for _, s := range m.Services {
			sj := serviceJSON{Name: s.Name, Partitions: append([]int{}, s.Partitions...), Load: []int{}}
			for _, p := range s.Partitions {
				l, ok := s.Load[p]
				if !ok {
					l = -1
				}
				sj.Load = append(sj.Load, l)
			}
			mj.Services = append(mj.Services, sj)
		}
		out = append(out, mj)
	}
	return out
}

func partitionsJSON(ps []neptune.PartitionInfo) []partitionJSON {
	out := []partitionJSON{}
	for _, p := range ps {
		pj := partitionJSON{Service: p.Service, Partition: p.Partition, Level: p.Level, Linearizable: p.Linearizable, Replicas: []replicaJSON{}}
		for _, r := range p.Replicas {
			if r.Role == "primary" && r.Stale == "" {
				pj.Primary = r.Node
			}
			pj.Replicas = append(pj.Replicas, replicaJSON{Node: r.Node, Role: r.Role, Epoch: r.Epoch, Primary: r.Primary, Version: r.Version,
				Commit: r.Commit, Last: r.Last, LeaseMs: r.Lease.Milliseconds(), Diverged: r.Diverged, Stale: r.Stale})
		}
		out = append(out, pj)
	}
	return out
}

// replicaSetJSON is one step of `neptune partition add|remove|move|priority -o json`.
type replicaSetJSON struct {
	Service   string              `json:"service"`
	Partition int                 `json:"partition"`
	Step      string              `json:"step"`
	Done      bool                `json:"done"`
	Ms        int64               `json:"ms"`
	Primary   string              `json:"primary"`
	Members   []replicaMemberJSON `json:"members"`
}

type replicaMemberJSON struct {
	Node     string `json:"node"`
	Priority int    `json:"priority"`
	Learner  bool   `json:"learner,omitempty"`
}

func setJSON(service string, partition int, step string, took time.Duration, rs neptune.ReplicaSet) replicaSetJSON {
	out := replicaSetJSON{Service: service, Partition: partition, Step: step, Done: rs.Done, Ms: took.Milliseconds(), Primary: rs.Primary,
		Members: []replicaMemberJSON{}}
	for _, m := range rs.Members {
		out.Members = append(out.Members, replicaMemberJSON{Node: m.Node, Priority: m.Priority, Learner: m.Learner})
	}
	return out
}

// promoteJSON is `neptune partition promote -o json`: the replica after.
func promoteJSON(service string, partition int, forced bool, r neptune.ReplicaInfo) any {
	return struct {
		Service   string      `json:"service"`
		Partition int         `json:"partition"`
		Forced    bool        `json:"forced"`
		Replica   replicaJSON `json:"replica"`
	}{service, partition, forced, replicaJSON{Node: r.Node, Role: r.Role, Epoch: r.Epoch, Primary: r.Primary, Version: r.Version,
		Commit: r.Commit, Last: r.Last, LeaseMs: r.Lease.Milliseconds(), Diverged: r.Diverged, Stale: r.Stale}}
}
