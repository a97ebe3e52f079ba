package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/internal/dashboard"
	"github.com/neptune-cluster/neptune/internal/gage"
	"github.com/neptune-cluster/neptune/internal/gateway"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/security"
)

// gatewayOptions are the flags of `neptune gateway`; each overrides the
// config file's key of the same name, when given.
type gatewayOptions struct {
	config, listen, metrics, host, advertise, logLevel string
	logFormat, otlpEndpoint                            string
	sampleRatio                                        float64
	join                                               []string
	sec                                                securityFlags
}

func newGatewayCmd() *cobra.Command {
	var o gatewayOptions
	cmd := &cobra.Command{
		Use:   "gateway --config file.yaml [--listen :8080] [--join host:port] [flags]",
		Short: "Run an HTTP gateway with guaranteed rates per subscriber (Gage)",
		Long: `Run an HTTP/1.1 and HTTP/2 gateway in front of the cluster until
interrupted, then drain the requests in flight.

The config file (see examples/gateway.yaml) maps host, path prefix and
method to a service method and a partition, and lists the subscribers:
their reservations and limits in generic requests per second, and the Host
and path rules and API keys (stored as SHA-256 digests; see hash-key) that
classify requests to them. Requests wait for their turn in a Gage scheduler
(credit, tag or fifo); a subscriber over its share when there is no spare
capacity is answered 429 with Retry-After.

Status codes: 404 no route, service, method or partition, or the service
found nothing (its error is a neptune.ErrNotFound); 405 method not routed;
400 bad partition or affinity key, or the service refused the request as malformed
(neptune.ErrBadRequest); 401 unknown or missing API key; 403 key not
allowed on the route; 413 body too large; 429 over share; 502 the service
failed; 503 no replica, no primary or overloaded; 504 deadline. An error
the service returned is answered with its message.

A secured gateway presents a gateway certificate (--cert gateway/NAME,
from neptune tls cert create --gateway NAME): nodes let it call services,
and with gossip: in the config it signs its demand datagrams with it and
goes by NAME among its peers, which accept demand only from gateway
certificates of the cluster's CA.`,
		Example: `  neptune gateway --config examples/gateway.yaml --tls-dir pki --cert gateway/gw1
  neptune gateway --config gw1.yaml --tls-dir pki --cert gateway/gw1 --join 127.0.0.1:7946
  neptune gateway --config gw.yaml --listen :8443 --metrics 127.0.0.1:9101`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := o.fileConfig(cmd.Flags())
			if err != nil {
				return err
			}
			log, err := logger(o.logLevel, o.logFormat)
			if err != nil {
				return err
			}
			tp, flush, err := o.tracing(cmd.Flags()).provider(cmd.Context(), "neptune-gateway", cfg.Name)
			if err != nil {
				return err
			}
			defer flush()
			sec, err := o.sec.clientFiles()
			if err != nil {
				return err
			}
			return runGateway(cmd.Context(), cmd.OutOrStdout(), cfg, o.host, o.advertise, sec, log, tp)
		},
	}
	o.addFlags(cmd.Flags())
	_ = cmd.MarkFlagRequired("config")
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
	_ = cmd.RegisterFlagCompletionFunc("log-level", fixedCompletion(logLevels...))
	_ = cmd.RegisterFlagCompletionFunc("log-format", fixedCompletion(logFormats...))
	cmd.AddCommand(newHashKeyCmd())
	return cmd
}

func (o *gatewayOptions) addFlags(fs *pflag.FlagSet) {
	fs.SortFlags = false
	fs.StringVar(&o.config, "config", "", "YAML config `file` (required); flags override its keys")
	fs.StringVar(&o.listen, "listen", gateway.DefaultListen, "`host:port` of the HTTP listener (config: listen)")
	fs.StringSliceVar(&o.join, "join", nil, "gossip `host:port` of a node to join; list (config: join)")
	fs.StringVar(&o.metrics, "metrics", "", "`host:port` serving Prometheus /metrics on its own listener; empty disables (config: metrics)")
	fs.StringVar(&o.host, "host", "", "address the gateway's gossip listener binds to (default 127.0.0.1 if every --join is on loopback, else every interface)")
	fs.StringVar(&o.advertise, "advertise", "", "address the nodes reach the gateway's gossip at (default: --host if it names one address, else the local address on the route to the first --join)")
	o.sec.add(fs, "gateway/gateway", "the gateway")
	fs.StringVar(&o.logLevel, "log-level", "info", "log `level`: "+strings.Join(logLevels, ", "))
	fs.StringVar(&o.logFormat, "log-format", "text", "log `format`: "+strings.Join(logFormats, ", "))
	addTracingFlags(fs, &o.otlpEndpoint, &o.sampleRatio)
}

// tracing is the tracing flags' settings (fs says which were given).
func (o *gatewayOptions) tracing(fs *pflag.FlagSet) tracing {
	t := tracing{Endpoint: o.otlpEndpoint}
	if fs.Changed("trace-sample-ratio") {
		t.SampleRatio = &o.sampleRatio
	}
	return t
}

// fileConfig reads --config and applies the flags given on the command
// line. A config that fails validation is an error naming the key (exit
// 1), as for `neptune node`.
func (o *gatewayOptions) fileConfig(fs *pflag.FlagSet) (gateway.Config, error) {
	cfg, err := gateway.LoadConfig(o.config)
	if err != nil {
		return cfg, err
	}
	if fs.Changed("listen") {
		cfg.Listen = o.listen
	}
	if fs.Changed("join") {
		cfg.Join = o.join
	}
	if fs.Changed("metrics") {
		cfg.Metrics = o.metrics
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: %w", o.config, err)
	}
	if len(cfg.Join) == 0 {
		return cfg, Usagef("no node to join: give --join host:port or join: in %s", o.config)
	}
	return cfg, nil
}

// runGateway joins the cluster as a client and serves until ctx ends.
func runGateway(ctx context.Context, stdout io.Writer, cfg gateway.Config, host, advertise string, sec neptune.Security, log *slog.Logger, tp trace.TracerProvider) error {
	cfg = cfg.WithDefaults()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The gossip's material first: a wrong certificate fails at once,
	// not after joining the cluster.
	var gsec gateway.GossipSecurity
	if cfg.Gossip != "" {
		var err error
		if gsec, err = gatewayGossip(ctx, sec, log); err != nil {
			return err
		}
	}
	// Each service its routes' policy (balance:, or affinity for a
	// route that reads an affinity key); the others the default.
	client, err := neptune.Dial(ctx, neptune.ClientConfig{Join: cfg.Join, Host: host, Advertise: advertise, Registerer: reg, Logger: log, TracerProvider: tp, Security: sec,
		ServiceBalance: cfg.Balancing()})
	if err != nil {
		return err
	}
	defer client.Close()
	g, err := gateway.New(cfg, gateway.Deps{Caller: client, Registerer: reg, Logger: log, TracerProvider: tp, Gossip: gsec})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("gateway: listen (listen %q): %w", cfg.Listen, err)
	}
	metricsAddr := "off"
	if cfg.Metrics != "" {
		hsec, err := gatewayHTTPSecurity(sec, log)
		if err != nil {
			ln.Close()
			return err
		}
		if err := reg.Register(hsec.CertCollector()); err != nil {
			ln.Close()
			return fmt.Errorf("gateway: %w", err)
		}
		mln, err := net.Listen("tcp", cfg.Metrics)
		if err != nil {
			ln.Close()
			return fmt.Errorf("gateway: listen for metrics (metrics %q): %w", cfg.Metrics, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.Handle(gateway.StatusPath, g.StatusHandler())
		mountGatewayHealth(ctx, mux, client)
		rss := dashboard.PeerRSS{}
		if !hsec.Insecure() {
			rss.Scheme, rss.Client = "https", hsec.PeerHTTPClient()
		}
		if err := mountGatewayDashboard(mux, g, client, reg, rss); err != nil {
			ln.Close()
			mln.Close()
			return err
		}
		// Secured like the nodes' listeners (security.MemberAccess).
		msrv := &http.Server{Handler: hsec.HTTPGuard(mux, security.MemberAccess(dashboard.APIPrefix+"self")), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = msrv.Serve(hsec.HTTPListener(mln)) }()
		defer msrv.Close()
		metricsAddr = mln.Addr().String()
	}
	gossip := "off"
	if a := g.GossipAddr(); a != "" {
		gossip = a + " as " + g.Name()
	}
	fmt.Fprintf(stdout, "gateway up: http %s, metrics %s, gossip %s, scheduler %s, %d routes, %d subscribers\n",
		ln.Addr(), metricsAddr, gossip, cfg.Scheduler, len(cfg.Routes), len(cfg.Gage().All()))
	return g.Serve(ctx, ln)
}

// gatewayHTTPSecurity is the material that secures the gateway's
// metrics listener: its certificate (--cert) on a secured cluster.
func gatewayHTTPSecurity(sec neptune.Security, log *slog.Logger) (*security.Material, error) {
	if sec.Insecure {
		return security.Load(security.Config{Insecure: true})
	}
	role, name, _ := strings.Cut(sec.Cert, "/")
	m, err := security.Load(security.Config{Dir: sec.Dir, Identity: pki.Identity{Role: pki.Role(role), Name: name},
		KeyringFile: sec.KeyringFile, Label: sec.Cluster, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics listener: %w", err)
	}
	return m, nil
}

// gatewayGossip authenticates the demand gossip with the other gateways
// under the cluster keyring the gateway's client joins with (watched, so
// `neptune keyring use` rotates the gossip's key too) and signs it with
// the gateway's certificate (--cert gateway/NAME), whose name the
// gateway goes by; with --insecure the datagrams are plain.
func gatewayGossip(ctx context.Context, sec neptune.Security, log *slog.Logger) (gateway.GossipSecurity, error) {
	if sec.Insecure {
		return gateway.GossipSecurity{Insecure: true}, nil
	}
	role, name, _ := strings.Cut(sec.Cert, "/")
	m, err := security.Load(security.Config{
		Dir: sec.Dir, Identity: pki.Identity{Role: pki.Role(role), Name: name},
		KeyringFile: sec.KeyringFile, Label: sec.Cluster, Logger: log,
	})
	if err != nil {
		return gateway.GossipSecurity{}, fmt.Errorf("gateway: gossip keys: %w", err)
	}
	if id := m.TLS.Identity(); id.Role != pki.RoleGateway {
		return gateway.GossipSecurity{}, fmt.Errorf("gateway: gossip: signing demand needs a gateway certificate, and --cert %s is a %s's (create one with neptune tls cert create --gateway NAME, present it with --cert gateway/NAME)", sec.Cert, id.Role)
	}
	go m.WatchKeyring(ctx)
	return gateway.GossipSecurity{Keys: m.Keys, Label: m.Label, Certs: m.TLS}, nil
}

func newHashKeyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "hash-key < key",
		Short: "Print the digest of an API key, for a subscriber's api_keys",
		Long: `Read an API key from standard input (one line) and print its SHA-256
digest, the form subscribers[i].api_keys takes: the config never holds a
key itself. The key is read from stdin rather than the command line so it
stays out of shell history and process listings.`,
		Example: `  printf %s "$KEY" | neptune gateway hash-key`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			line, err := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			key := strings.TrimRight(line, "\r\n")
			if key == "" {
				return Usagef("no key on standard input")
			}
			fmt.Fprintln(cmd.OutOrStdout(), gage.HashKey(key))
			return nil
		},
	}
}

// mountGatewayHealth serves /livez and /healthz (the process serves HTTP)
// and /readyz on the gateway's metrics listener: ready while it is not
// draining (ctx not ended) and its yellow pages show a node hosting a
// service, so it has somewhere to send calls.
func mountGatewayHealth(ctx context.Context, mux *http.ServeMux, c *neptune.Client) {
	live := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("GET /livez", live)
	mux.HandleFunc("GET /healthz", live)
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		why := ""
		switch {
		case ctx.Err() != nil:
			why = "draining"
		case !slices.ContainsFunc(c.Members(r.Context(), 0), func(m neptune.Member) bool { return len(m.Services) > 0 }):
			why = "no node hosting a service in the yellow pages"
		}
		if why != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: "+why)
			return
		}
		fmt.Fprintln(w, "ready")
	})
}
