package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/service"
)

// DefaultCluster is the cluster name of a NodeConfig that names none.
const DefaultCluster = "neptune"

// IdentityFile is the name, inside a node's data directory, of the file
// that says whose the directory is.
const IdentityFile = "neptune-identity.json"

// Identity is what a data directory records of the node that owns it: the
// cluster, the node id and how many times the node has started on it.
type Identity struct {
	Cluster     string `json:"cluster"`
	Node        string `json:"node"`
	Incarnation uint64 `json:"incarnation"`
	// Sum is a CRC-32C of the fields above (absent in files written
	// before it was recorded): a flipped byte that still parses is found.
	Sum uint32 `json:"crc32c,omitempty"`
}

// sum is the checksum Identity.Sum records.
func (id Identity) sum() uint32 {
	return crc32.Checksum(fmt.Appendf(nil, "%s\x00%s\x00%d", id.Cluster, id.Node, id.Incarnation), crc32.MakeTable(crc32.Castagnoli))
}

// ErrCorruptIdentity is returned when a data directory's identity file is
// damaged: the node cannot tell whose the directory is.
var ErrCorruptIdentity = errors.New("data directory identity file damaged")

// ErrForeignDataDir is returned when a data directory belongs to another
// node or another cluster: starting on it would serve that node's writes
// under this node's name.
var ErrForeignDataDir = errors.New("data directory belongs to another node")

// claimIdentity makes dir this node's: a directory without an identity
// file (new, or from before identities were recorded) is claimed; one of
// another node or cluster is refused; the incarnation goes up by one on
// every start. The file is replaced atomically (temp file, fsync, rename,
// fsync of the directory), so a crash leaves the old or the new one.
func claimIdentity(dir, cluster, node string) (Identity, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Identity{}, fmt.Errorf("neptune: data directory: %w", err)
	}
	path := filepath.Join(dir, IdentityFile)
	var id Identity
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		id = Identity{Cluster: cluster, Node: node}
	case err != nil:
		return Identity{}, fmt.Errorf("neptune: read %s: %w", path, err)
	default:
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		err := dec.Decode(&id)
		if err == nil && id.Sum != 0 && id.Sum != id.sum() {
			err = fmt.Errorf("checksum %08x, recorded %08x", id.sum(), id.Sum)
		}
		if err != nil {
			return Identity{}, fmt.Errorf("neptune: %w: %s (%w): if this directory is node %q's of cluster %q, remove the file and start again (the start records it anew)",
				ErrCorruptIdentity, path, err, node, cluster)
		}
		if id.Node != node || id.Cluster != cluster {
			return Identity{}, fmt.Errorf("neptune: data directory %s belongs to node %q of cluster %q, not to node %q of cluster %q (NodeConfig.DataDir, ID, Cluster): %w",
				dir, id.Node, id.Cluster, node, cluster, ErrForeignDataDir)
		}
	}
	id.Incarnation++
	id.Sum = id.sum()
	if err := writeAtomic(path, id); err != nil {
		return Identity{}, err
	}
	return id, nil
}

func writeAtomic(path string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, IdentityFile+".tmp*")
	if err != nil {
		return fmt.Errorf("neptune: write node identity: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after the rename
	if _, err = f.Write(append(b, '\n')); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("neptune: write node identity %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync() // make the rename durable
		_ = d.Close()
	}
	return nil
}

// clusterMeta is what a node tells the others at join (membership's node
// meta): its cluster and, per hosted service, a summary of the service's
// replication block. Nodes of one service must agree on it: replicas that
// disagree on the level, the replica set or the timing rules would each
// follow a different protocol.
type clusterMeta struct {
	Cluster  string                 `json:"c"`
	Services map[string]replSummary `json:"s,omitempty"`
}

// replSummary is a service's replication block, field by field as the
// YAML names them; Level 0 means the service is hosted unreplicated.
type replSummary struct {
	Level     int    `json:"l"`
	Staleness int64  `json:"x,omitempty"` // milliseconds
	MinLive   int    `json:"m,omitempty"`
	Degree    int    `json:"d,omitempty"`
	Nodes     uint32 `json:"n,omitempty"` // FNV-1a of the node list
	Replicas  uint32 `json:"r,omitempty"` // FNV-1a of the explicit replica map
}

func summarize(r *service.Replication) replSummary {
	if r == nil {
		return replSummary{}
	}
	h := fnv.New32a()
	for _, n := range r.Nodes {
		fmt.Fprintf(h, "%s\x00", n)
	}
	s := replSummary{Level: r.Level, Staleness: r.Staleness.Milliseconds(), MinLive: r.MinLive, Degree: r.Degree, Nodes: h.Sum32()}
	if len(r.Nodes) == 0 {
		s.Nodes = 0
	}
	if len(r.Replicas) > 0 {
		h := fnv.New32a()
		for _, p := range slices.Sorted(maps.Keys(r.Replicas)) {
			fmt.Fprintf(h, "%d:", p)
			for _, rs := range r.Replicas[p] {
				fmt.Fprintf(h, "%s=%d,", rs.Node, rs.Priority)
			}
		}
		s.Replicas = h.Sum32()
	}
	return s
}

// diff names the first field where s (this node) and o (a peer) differ.
func (s replSummary) diff(o replSummary) (field string, mine, theirs any) {
	switch {
	case (s.Level == 0) != (o.Level == 0):
		return "replication", s.Level != 0, o.Level != 0
	case s.Level != o.Level:
		return "replication.level", s.Level, o.Level
	case s.Degree != o.Degree:
		return "replication.degree", s.Degree, o.Degree
	case s.Nodes != o.Nodes:
		return "replication.nodes", fmt.Sprintf("%08x", s.Nodes), fmt.Sprintf("%08x", o.Nodes)
	case s.Replicas != o.Replicas:
		return "replication.replicas", fmt.Sprintf("%08x", s.Replicas), fmt.Sprintf("%08x", o.Replicas)
	case s.Staleness != o.Staleness:
		return "replication.staleness", time.Duration(s.Staleness) * time.Millisecond, time.Duration(o.Staleness) * time.Millisecond
	case s.MinLive != o.MinLive:
		return "replication.min_live", s.MinLive, o.MinLive
	}
	return "", nil, nil
}

// ErrConfigMismatch is returned by Start when this node's configuration
// disagrees with a live member's.
var ErrConfigMismatch = errors.New("configuration disagrees with the cluster")

// meta encodes what this node announces at join, trimmed to memberlist's
// limit (services past it go unchecked, with a warning).
func (n *Node) meta() []byte {
	m := clusterMeta{Cluster: n.cfg.Cluster, Services: map[string]replSummary{}}
	for _, name := range slices.Sorted(maps.Keys(n.services)) {
		m.Services[name] = summarize(n.services[name].svc.Replication)
		if b, _ := json.Marshal(m); len(b) > memberlist.MetaMaxSize {
			delete(m.Services, name)
			n.log.Warn("too many services to compare their replication blocks at join; some go unchecked", "service", name)
			break
		}
	}
	b, _ := json.Marshal(m)
	return b
}

// checkPeers refuses a start whose cluster name or replication blocks
// disagree with a live member's, naming the field. Members without meta
// (clients) are skipped.
func (n *Node) checkPeers(peers []membership.Peer) error {
	var mine clusterMeta
	_ = json.Unmarshal(n.meta(), &mine)
	for _, p := range peers {
		if len(p.Meta) == 0 {
			continue
		}
		var theirs clusterMeta
		if err := json.Unmarshal(p.Meta, &theirs); err != nil {
			continue // not a node of this version
		}
		if theirs.Cluster != mine.Cluster {
			return fmt.Errorf("neptune: node %q at %s is in cluster %q, this node in %q (NodeConfig.Cluster): %w",
				p.Name, p.Addr, theirs.Cluster, mine.Cluster, ErrConfigMismatch)
		}
		for _, name := range slices.Sorted(maps.Keys(mine.Services)) {
			o, ok := theirs.Services[name]
			if !ok {
				continue
			}
			if field, a, b := mine.Services[name].diff(o); field != "" {
				return fmt.Errorf("neptune: service %q: %s is %v here but %v on node %q (every node hosting a service must declare the same replication block): %w",
					name, field, a, b, p.Name, ErrConfigMismatch)
			}
		}
	}
	return nil
}

// identity is what the node's gossip member tells and checks at join.
func (n *Node) identity() membership.Identity {
	return membership.Identity{
		Meta:  n.meta(),
		Check: n.checkPeers,
		OnConflict: func(other string) {
			n.log.Error("another process claims this node's id; it is refused, this node keeps serving", "other", other)
		},
	}
}
