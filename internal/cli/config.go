package cli

import (
	"bytes"
	"errors"
	"fmt"
	"go.yaml.in/yaml/v3"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
	"github.com/neptune-cluster/neptune/apps/echo"
	"github.com/neptune-cluster/neptune/apps/kv"
	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/apps/micro"
	"github.com/neptune-cluster/neptune/apps/search"
	"github.com/neptune-cluster/neptune/apps/work"
	"github.com/neptune-cluster/neptune/internal/balance"
	"github.com/neptune-cluster/neptune/internal/config"
)

// FileConfig is the node config file (YAML). Field names in errors are the
// YAML keys, so a user can find the line to fix.
type FileConfig struct {
	ID               string          `yaml:"id"`
	Host             string          `yaml:"host"`
	Advertise        string          `yaml:"advertise"` // host others dial; default host, or the route to join
	GossipPort       int             `yaml:"gossip_port"`
	RPCPort          int             `yaml:"rpc_port"`
	PollPort         int             `yaml:"poll_port"`
	Metrics          string          `yaml:"metrics"`
	Zone             string          `yaml:"zone"`  // failure domain, announced
	Pprof            bool            `yaml:"pprof"` // serve /debug/pprof/ on Metrics
	Join             []string        `yaml:"join"`
	JoinTimeout      Duration        `yaml:"join_timeout"`  // 0: keep trying the seeds until stopped
	DrainTimeout     Duration        `yaml:"drain_timeout"` // bound on the drain at SIGTERM (default 10 s)
	AnnounceInterval Duration        `yaml:"announce_interval"`
	AnnounceTTL      Duration        `yaml:"announce_ttl"`
	Balance          BalanceConfig   `yaml:"balance"`
	Services         []ServiceConfig `yaml:"services"`
	// DataDir holds replicated services' write logs and durable state.
	DataDir string `yaml:"data_dir"`
	// Security is the node's certificate directory and keyring
	// (secflags.go); required unless security.insecure is set.
	Security SecurityConfig `yaml:"security"`
	// Placement tunes automatic replica placement (neptune.Placement).
	Placement PlacementConfig `yaml:"placement"`
	// LogLevel is debug, info (default), warn or error; SIGHUP re-reads it.
	LogLevel string `yaml:"log_level"`
	// LogFormat is text (default) or json; read at start only.
	LogFormat string `yaml:"log_format"`
	// Tracing is otlp_endpoint and trace_sample_ratio (observe.go).
	Tracing tracing `yaml:",inline"`
	// Storage tunes how the node treats a full or corrupt data directory
	// (neptune.Storage).
	Storage StorageConfig `yaml:"storage"`
	// MaxInflightBytes is neptune.NodeConfig.MaxInflightBytes: the
	// request bytes the node holds at once (default 64MiB).
	MaxInflightBytes Bytes `yaml:"max_inflight_bytes"`
}

// StorageConfig is neptune.Storage: reserve_bytes (default 64 MiB: below
// it the node refuses writes and hands over its primaries),
// rebuild_corrupt (quarantine a corrupt replica and rebuild it from its
// peers instead of refusing to start).
type StorageConfig struct {
	ReserveBytes   uint64 `yaml:"reserve_bytes"`
	RebuildCorrupt bool   `yaml:"rebuild_corrupt"`
}

// PlacementConfig is neptune.Placement: off, grace (default 5m),
// interval (default 30s), max_in_flight (default 1).
type PlacementConfig struct {
	Off         bool     `yaml:"off"`
	Grace       Duration `yaml:"grace"`
	Interval    Duration `yaml:"interval"`
	MaxInFlight int      `yaml:"max_in_flight"`
}

// BalanceConfig selects the load-balancing policy of the node's client.
type BalanceConfig struct {
	Policy   string   `yaml:"policy"`
	PollSize int      `yaml:"poll_size"`
	Discard  Duration `yaml:"discard"`
	// LoadBound is the affinity policy's bound (Balancing.LoadBound).
	LoadBound float64 `yaml:"load_bound"`
	// Services gives the calls to a service a policy of their own
	// (NodeConfig.ServiceBalance), service name to policy name, as
	// {pcache: affinity}; that policy takes its defaults, not the
	// settings above.
	Services map[string]string `yaml:"services"`
}

// ServiceConfig hosts one built-in service on the node.
type ServiceConfig struct {
	Name       string     `yaml:"name"`
	Partitions Partitions `yaml:"partitions"`
	Workers    int        `yaml:"workers"`
	QueueLimit int        `yaml:"queue_limit"`
	// Classes, DefaultClass, Policy, OverloadWindow and Accounting
	// configure class-aware scheduling (classes.go).
	Classes        []ClassConfig `yaml:"classes"`
	DefaultClass   string        `yaml:"default_class"`
	Policy         string        `yaml:"policy"`
	OverloadWindow Duration      `yaml:"overload_window"`
	Accounting     string        `yaml:"accounting"`
	// IdentityClasses serves the calls of a certificate identity
	// ("client/partner") in a class, whatever class they name.
	IdentityClasses map[string]string `yaml:"identity_classes"`
	// Replication replicates the service's partitions (partition.go).
	Replication *ReplicationConfig `yaml:"replication"`
	// Storage, HTTP and Exec configure app services and external programs
	// (appservices.go): forum's or auction's database DSN or pcache's
	// directory; an HTTP service or an executable hosted as this service.
	Storage string              `yaml:"storage"`
	HTTP    *adapter.HTTPConfig `yaml:"http"`
	Exec    *adapter.ExecConfig `yaml:"exec"`
}

// minInflightBytes is a node's message limit (16 MiB): its in-flight
// budget must hold one message.
const minInflightBytes = 16 << 20

// Duration and Bytes are the shared config types (internal/config).
type (
	Duration = config.Duration
	Bytes    = config.Size
)

// ParseBytes reads a Bytes value.
var ParseBytes = config.ParseSize

// Partitions is a list of partition numbers, written as a YAML list or as
// text like "0-3,7".
type Partitions []int

// UnmarshalYAML accepts [0, 1] or "0-3,7".
func (p *Partitions) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		var xs []int
		if err := n.Decode(&xs); err != nil {
			return err
		}
		*p = xs
		return nil
	}
	xs, err := ParsePartitions(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*p = xs
	return nil
}

// ParsePartitions parses "0-3,7" into [0 1 2 3 7].
func ParsePartitions(s string) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("partition %q is not a non-negative number or range like 0-3", part)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return nil, fmt.Errorf("partition range %q is not like 0-3", part)
			}
		}
		if b-a > 1<<16 {
			return nil, fmt.Errorf("partition range %q is too large", part)
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}

// readConfig reads a node config file; flags may still change it, so it
// is validated later.
func readConfig(path string) (FileConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return FileConfig{}, fmt.Errorf("config: %w", err)
	}
	c, err := decodeConfig(b)
	if err != nil {
		return FileConfig{}, fmt.Errorf("%w (in %s)", err, path)
	}
	return c, nil
}

// ParseConfig decodes YAML, rejecting unknown keys, and validates it.
func ParseConfig(b []byte) (FileConfig, error) {
	c, err := decodeConfig(b)
	if err != nil {
		return FileConfig{}, err
	}
	return c, c.Validate()
}

func decodeConfig(b []byte) (FileConfig, error) {
	var c FileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return FileConfig{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// builtins are the services a node can host from a config file.
var builtins = map[string]func() neptune.Service{
	"echo": echo.Service,
	"kv":   func() neptune.Service { return kv.New().Service() },
	// listappend is the fault suite's workload (durable when replicated).
	listappend.Name: func() neptune.Service { return listappend.New().Service() },
	"micro":         micro.Service,
	"search":        search.Service,
	"work":          work.Service,
}

func builtinNames() []string {
	var names []string
	for n := range builtins {
		names = append(names, n)
	}
	for n := range appServices {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Validate checks every field and names the first bad one.
func (c FileConfig) Validate() error {
	if c.ID == "" {
		return errors.New("config: id is required")
	}
	if _, err := newLogger(io.Discard, c.LogFormat, slog.LevelInfo); err != nil {
		return err
	}
	if err := c.Tracing.Validate(); err != nil {
		return err
	}
	for key, p := range map[string]int{"gossip_port": c.GossipPort, "rpc_port": c.RPCPort, "poll_port": c.PollPort} {
		if p < 0 || p > 65535 {
			return fmt.Errorf("config: %s must be in 0..65535, got %d", key, p)
		}
	}
	if c.AnnounceInterval < 0 {
		return fmt.Errorf("config: announce_interval must be positive, got %v", time.Duration(c.AnnounceInterval))
	}
	if c.Placement.Grace < 0 || c.Placement.Interval < 0 || c.Placement.MaxInFlight < 0 {
		return fmt.Errorf("config: placement.grace (%v), placement.interval (%v) and placement.max_in_flight (%d) must be >= 0 (0: the default)",
			time.Duration(c.Placement.Grace), time.Duration(c.Placement.Interval), c.Placement.MaxInFlight)
	}
	if c.DrainTimeout < 0 {
		return fmt.Errorf("config: drain_timeout must not be negative, got %v", time.Duration(c.DrainTimeout))
	}
	if c.JoinTimeout < 0 {
		return fmt.Errorf("config: join_timeout must not be negative (0 keeps trying until stopped), got %v", time.Duration(c.JoinTimeout))
	}
	if c.MaxInflightBytes != 0 && c.MaxInflightBytes < minInflightBytes {
		return fmt.Errorf("config: max_inflight_bytes must be 0 (the default, 64MiB) or at least 16MiB (a node's message limit), got %d", c.MaxInflightBytes)
	}
	if c.AnnounceTTL < 0 {
		return fmt.Errorf("config: announce_ttl must be positive, got %v", time.Duration(c.AnnounceTTL))
	}
	if c.AnnounceTTL != 0 && c.AnnounceInterval != 0 && c.AnnounceTTL <= c.AnnounceInterval {
		return fmt.Errorf("config: announce_ttl (%v) must exceed announce_interval (%v)", time.Duration(c.AnnounceTTL), time.Duration(c.AnnounceInterval))
	}
	if _, _, err := c.Balance.toBalance(); err != nil {
		return err
	}
	if len(c.Services) == 0 {
		return errors.New("config: services is empty: host at least one service")
	}
	seen := map[string]bool{}
	for i, s := range c.Services {
		where := fmt.Sprintf("config: services[%d]", i)
		switch {
		case s.Name == "":
			return fmt.Errorf("%s.name is required", where)
		case builtins[s.Name] == nil && !s.hostsProgram():
			return fmt.Errorf("%s.name: unknown service %q (built in: %s)", where, s.Name, strings.Join(builtinNames(), ", "))
		case seen[s.Name]:
			return fmt.Errorf("%s.name: service %q is listed twice", where, s.Name)
		case len(s.Partitions) == 0:
			return fmt.Errorf("%s.partitions is empty", where)
		case s.Workers < 0:
			return fmt.Errorf("%s.workers must be >= 0, got %d", where, s.Workers)
		case s.QueueLimit < 0:
			return fmt.Errorf("%s.queue_limit must be >= 0, got %d", where, s.QueueLimit)
		}
		for _, p := range s.Partitions {
			if p < 0 {
				return fmt.Errorf("%s.partitions: %d is negative", where, p)
			}
		}
		if err := s.validateApp(where); err != nil {
			return err
		}
		if err := s.validateClasses(where); err != nil {
			return err
		}
		seen[s.Name] = true
	}
	return c.validateReplication()
}

// toBalance converts to the node's balancing settings, its client's and
// each service's own (nil if none), naming the YAML key on error.
func (b BalanceConfig) toBalance() (neptune.Balancing, map[string]neptune.Balancing, error) {
	if err := balance.CheckName(b.Policy); err != nil {
		return neptune.Balancing{}, nil, fmt.Errorf("config: balance.policy: %w", err)
	}
	if b.PollSize < 0 {
		return neptune.Balancing{}, nil, fmt.Errorf("config: balance.poll_size must be >= 1, got %d", b.PollSize)
	}
	if b.Discard < 0 {
		return neptune.Balancing{}, nil, fmt.Errorf("config: balance.discard must be >= 0, got %v", time.Duration(b.Discard))
	}
	if b.LoadBound != 0 && !(b.LoadBound >= 1 && !math.IsInf(b.LoadBound, 0)) {
		return neptune.Balancing{}, nil, fmt.Errorf("config: balance.load_bound must be 0 (the default) or a number >= 1, got %v", b.LoadBound)
	}
	var services map[string]neptune.Balancing
	for _, name := range slices.Sorted(maps.Keys(b.Services)) {
		if name == "" {
			return neptune.Balancing{}, nil, errors.New("config: balance.services: an entry names no service")
		}
		if err := balance.CheckName(b.Services[name]); err != nil {
			return neptune.Balancing{}, nil, fmt.Errorf("config: balance.services.%s: %w", name, err)
		}
		if services == nil {
			services = map[string]neptune.Balancing{}
		}
		services[name] = neptune.Balancing{Policy: b.Services[name]}
	}
	return neptune.Balancing{Policy: b.Policy, PollSize: b.PollSize, Discard: time.Duration(b.Discard), LoadBound: b.LoadBound}, services, nil
}
