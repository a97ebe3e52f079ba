package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/neptune-cluster/neptune"
)

func runNode(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlags("node", "[-config file.yaml] [flags]")
	var (
		cfgPath  = fs.String("config", "", "YAML config file; flags below override its fields")
		id       = fs.String("id", "", "node id (config: id)")
		host     = fs.String("host", "", "address to bind (config: host, default 127.0.0.1)")
		gossip   = fs.Int("gossip-port", -1, "memberlist port (config: gossip_port; 0 picks one)")
		rpc      = fs.Int("rpc-port", -1, "gRPC port (config: rpc_port)")
		poll     = fs.Int("poll-port", -1, "UDP load poll port (config: poll_port)")
		metrics  = fs.String("metrics", "", "host:port for Prometheus /metrics (config: metrics)")
		pprofOn  = fs.Bool("pprof", false, "also serve /debug/pprof/ on the metrics address (config: pprof)")
		policy   = fs.String("balance", "", "load-balancing policy (config: balance.policy)")
		interval = fs.Duration("announce-interval", 0, "yellow-page refresh interval (config: announce_interval, default 1s)")
		ttl      = fs.Duration("announce-ttl", 0, "yellow-page entry lifetime (config: announce_ttl, default 5s)")
		logLevel = fs.String("log-level", "info", "debug, info, warn or error")
		dataDir  = fs.String("data-dir", "", "directory for replicated services' write logs and state (config: data_dir)")
		join     listFlag
		services repeatFlag
	)
	fs.Var(&join, "join", "gossip address of a node to join; repeatable (config: join)")
	fs.Var(&services, "service", "host a built-in service as name:partitions, e.g. kv:0-3; repeatable (config: services)")
	if err := parse(fs, args); err != nil {
		return err
	}
	var fc FileConfig
	if *cfgPath != "" {
		var err error
		if fc, err = readConfig(*cfgPath); err != nil {
			return err
		}
	}
	override(&fc.ID, *id)
	override(&fc.Host, *host)
	override(&fc.Metrics, *metrics)
	override(&fc.Balance.Policy, *policy)
	override(&fc.DataDir, *dataDir)
	fc.Pprof = fc.Pprof || *pprofOn
	for _, p := range []struct {
		dst *int
		v   int
	}{{&fc.GossipPort, *gossip}, {&fc.RPCPort, *rpc}, {&fc.PollPort, *poll}} {
		if p.v >= 0 {
			*p.dst = p.v
		}
	}
	if *interval != 0 {
		fc.AnnounceInterval = Duration(*interval)
	}
	if *ttl != 0 {
		fc.AnnounceTTL = Duration(*ttl)
	}
	if len(join) > 0 {
		fc.Join = join
	}
	for _, s := range services {
		name, parts, ok := strings.Cut(s, ":")
		if !ok {
			return usagef("-service %q: want name:partitions, e.g. kv:0-3", s)
		}
		ps, err := ParsePartitions(parts)
		if err != nil {
			return usagef("-service %q: %v", s, err)
		}
		fc.Services = append(fc.Services, ServiceConfig{Name: name, Partitions: ps})
	}
	if err := fc.Validate(); err != nil {
		return err
	}
	log, err := newLogger(*logLevel)
	if err != nil {
		return err
	}
	node, err := buildNode(fc, log)
	if err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "node %s up: gossip %s, rpc %s\n", fc.ID, node.GossipAddr(), node.RPCAddr())
	<-ctx.Done()
	return node.Close()
}

// buildNode creates a node from a validated config with its services.
func buildNode(fc FileConfig, log *slog.Logger) (*neptune.Node, error) {
	bal, err := fc.Balance.toBalance()
	if err != nil {
		return nil, err
	}
	node, err := neptune.NewNode(neptune.NodeConfig{
		ID:               fc.ID,
		Host:             fc.Host,
		GossipPort:       fc.GossipPort,
		RPCPort:          fc.RPCPort,
		PollPort:         fc.PollPort,
		MetricsAddr:      fc.Metrics,
		Pprof:            fc.Pprof,
		Join:             fc.Join,
		AnnounceInterval: time.Duration(fc.AnnounceInterval),
		AnnounceTTL:      time.Duration(fc.AnnounceTTL),
		Balance:          bal,
		Logger:           log,
		DataDir:          fc.DataDir,
	})
	if err != nil {
		return nil, err
	}
	for _, s := range fc.Services {
		var svc neptune.Service
		parts := s.Partitions
		if s.Replication != nil {
			if svc, parts, err = replicatedService(fc, s); err != nil {
				return nil, err
			}
			if len(parts) == 0 {
				continue // no replica of this service on this node
			}
		} else if svc, err = s.service(fc.DataDir); err != nil {
			return nil, err
		}
		if s.Workers != 0 {
			svc.Workers = s.Workers
		}
		if s.QueueLimit != 0 {
			svc.QueueLimit = s.QueueLimit
		}
		if err := s.applyClasses(&svc); err != nil {
			return nil, err
		}
		if err := node.Register(svc, parts...); err != nil {
			return nil, err
		}
	}
	return node, nil
}

func override(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}
