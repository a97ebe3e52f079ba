// Package security loads a member's security material (its certificate
// source, the gossip keyring and the poll authenticator derived from it)
// and hands each layer its part: the one place a node or client turns
// security on.
//
//	m, err := security.Load(security.Config{Dir: "pki", Identity: id, KeyringFile: "pki/keyring.json"})
//	grpcOpts, err := m.Transport().ServerOptions()   // node's gRPC server
//	conns, err := m.Transport().NewConns()           // every member's dialer
//	m.Gossip(&gossipCfg)                             // before membership.Start
//	transport.ListenPoll(addr, load, log, m.PollServerOptions()...)
//	transport.NewPoller(log, m.PollerOptions()...)
//	go m.WatchKeyring(ctx, gossip)                    // live key rotation
//
// Security is on unless Config.Insecure is set; Load with neither
// material nor Insecure fails, so plaintext is always a decision.
package security

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/neptune-cluster/neptune/internal/clock"
	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/pki"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// KeyringFileName is the keyring's name in a PKI directory, where Scratch
// puts it and Config.KeyringFile defaults to.
const KeyringFileName = "keyring.json"

// Defaults of the per-source rate limits: flood guards, far above what a
// member sends (a busy client polls a node thousands of times a second; a
// loopback cluster's nodes share one source address for gossip streams).
const (
	DefaultPollRate    = 20000
	DefaultPollBurst   = 40000
	DefaultStreamRate  = 200
	DefaultStreamBurst = 400
	// DefaultKeyringCheck is how often WatchKeyring looks at the file.
	DefaultKeyringCheck = 5 * time.Second
)

// Config says where a member's material is.
type Config struct {
	// Insecure turns every protection off: plaintext gRPC without
	// authorisation, gossip without key or signatures, polls without
	// HMAC. Only when explicitly asked; the member should log a warning.
	Insecure bool
	// Dir holds ca.pem and the member's certificate and key, named as
	// pki.FilesFor names them (node-<id>.pem, node-<id>-key.pem).
	Dir string
	// Identity is who this member is: a node's certificate must name
	// its node id, and a file naming anyone else is refused.
	Identity pki.Identity
	// Files overrides the paths Dir and Identity give.
	Files *pki.Files
	// KeyringFile is the gossip keyring; "" is Dir/keyring.json.
	KeyringFile string
	// Label is the gossip label; "" is the cluster name the CA records.
	Label string
	// Reload is how often certificate files are checked for changes
	// (pki.SourceConfig.Interval).
	Reload time.Duration
	// Rate limits per source address; zero values take the defaults,
	// negative ones turn a limit off.
	PollRate, StreamRate   float64
	PollBurst, StreamBurst int
	// PollWindow and MaxAnnouncementAge bound how far the clocks of two
	// members may disagree before polls, then announcements, between them
	// are refused; zero values take transport.DefaultPollWindow and
	// membership.DefaultMaxAnnouncementAge.
	PollWindow, MaxAnnouncementAge time.Duration
	Logger                         *slog.Logger
	Clock                          clock.Clock
}

// Material is a member's loaded security material.
type Material struct {
	// TLS is the certificate source; nil when insecure.
	TLS *pki.Source
	// Keyring is the live gossip keyring; nil when insecure.
	Keyring *memberlist.Keyring
	// Label is the cluster's gossip label.
	Label string
	// PollAuth authenticates load polls; nil when insecure.
	PollAuth *transport.PollAuth
	// Refusals counts and logs every peer the member refuses; every
	// layer this material secures reports to it.
	Refusals *Refusals

	cfg  Config
	log  *slog.Logger
	keys atomic.Pointer[[][]byte] // what PollAuth reads, primary first
}

// Load reads the material Config names (nothing if Insecure).
func Load(cfg Config) (*Material, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Material{cfg: cfg, log: log, Refusals: NewRefusals(log, cfg.Clock)}
	if cfg.Insecure {
		return m, nil
	}
	if cfg.Dir == "" && cfg.Files == nil {
		return nil, errors.New("security: no certificate directory, and insecure mode not chosen")
	}
	files := pki.FilesFor(cfg.Dir, cfg.Identity)
	if cfg.Files != nil {
		files = *cfg.Files
	}
	src, err := pki.NewSource(pki.SourceConfig{Files: files, Expect: cfg.Identity, Interval: cfg.Reload, Clock: cfg.Clock, Logger: log})
	if err != nil {
		return nil, err
	}
	m.TLS = src
	if m.cfg.KeyringFile == "" {
		m.cfg.KeyringFile = keyringPath(cfg.Dir)
	}
	keys, err := membership.ReadKeyringFile(m.cfg.KeyringFile)
	if err != nil {
		return nil, err
	}
	if m.Keyring, err = membership.NewKeyring(keys); err != nil {
		return nil, err
	}
	m.keys.Store(&keys)
	m.Label = cfg.Label
	if m.Label == "" {
		m.Label = src.Cluster()
	}
	m.PollAuth, err = transport.NewPollAuth(transport.PollAuthConfig{
		Keys:  func() [][]byte { return *m.keys.Load() },
		Label: m.Label, Window: cfg.PollWindow, Clock: cfg.Clock,
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

func keyringPath(dir string) string { return filepath.Join(dir, KeyringFileName) }

// Insecure reports whether the member runs without protection.
func (m *Material) Insecure() bool { return m.TLS == nil }

// Transport is the gRPC security: mutual TLS with the authorisation
// table, or explicitly insecure.
func (m *Material) Transport() transport.Security {
	if m.Insecure() {
		return transport.Security{Insecure: true}
	}
	return transport.Security{TLS: m.TLS, Refusals: m.Refusals}
}

// Gossip sets cfg's keyring, label, announcement signing and stream
// rate limit. A client (no Announce) verifies announcements with its own
// certificate's CA.
func (m *Material) Gossip(cfg *membership.Config) {
	if m.Insecure() {
		return
	}
	cfg.Keyring, cfg.Label, cfg.Certs, cfg.MaxAnnouncementAge = m.Keyring, m.Label, m.TLS, m.cfg.MaxAnnouncementAge
	cfg.Refusals = m.Refusals
	cfg.StreamRate, cfg.StreamBurst = limit(m.cfg.StreamRate, DefaultStreamRate), burst(m.cfg.StreamBurst, DefaultStreamBurst)
}

// PollServerOptions authenticate a node's poll server and limit each
// source address.
func (m *Material) PollServerOptions() []transport.PollOption {
	if m.Insecure() {
		return nil
	}
	opts := []transport.PollOption{transport.WithPollAuth(m.PollAuth), transport.WithPollRefusals(m.Refusals)}
	if r := limit(m.cfg.PollRate, DefaultPollRate); r > 0 {
		opts = append(opts, transport.WithPollRateLimit(r, burst(m.cfg.PollBurst, DefaultPollBurst)))
	}
	if m.cfg.Clock != nil {
		opts = append(opts, transport.WithServerClock(m.cfg.Clock))
	}
	return opts
}

// PollerOptions authenticate a member's poller.
func (m *Material) PollerOptions() []transport.PollerOption {
	if m.Insecure() {
		return nil
	}
	return []transport.PollerOption{transport.WithPollerAuth(m.PollAuth), transport.WithPollerRefusals(m.Refusals)}
}

func limit(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return max(v, 0)
}

func burst(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Keys returns the cluster keys in use, the primary first (nil when
// insecure): what polls are authenticated with, and what a gateway's
// demand gossip derives its key from. Live: SetKeys and WatchKeyring
// change what it returns.
func (m *Material) Keys() [][]byte {
	if m.Insecure() {
		return nil
	}
	return *m.keys.Load()
}

// SetKeys makes keys (primary first) the member's gossip and poll keys,
// live.
func (m *Material) SetKeys(keys [][]byte) error {
	if m.Insecure() {
		return errors.New("security: an insecure member has no keyring")
	}
	if err := membership.SyncKeyring(m.Keyring, keys); err != nil {
		return err
	}
	keys = slices.Clone(keys)
	m.keys.Store(&keys)
	return nil
}

// Reload re-reads the certificate files and the keyring file now (an
// operator's SIGHUP); they are also re-read on their own, the
// certificates at most every 10 s and the keyring every 5 s. A file that
// fails to load leaves the material as it was and is reported.
func (m *Material) Reload() error {
	if m.Insecure() {
		return nil
	}
	return errors.Join(m.TLS.Reload(), m.ReloadKeyring())
}

// ReloadKeyring applies the keyring file now.
func (m *Material) ReloadKeyring() error {
	keys, err := membership.ReadKeyringFile(m.cfg.KeyringFile)
	if err != nil {
		return err
	}
	return m.SetKeys(keys)
}

// WatchKeyring applies the keyring file whenever it changes, checking
// every DefaultKeyringCheck until ctx ends: an operator's
// `neptune keyring install|use|remove` on the node's file takes effect
// without a restart. A file that does not parse is logged and skipped.
func (m *Material) WatchKeyring(ctx context.Context) {
	if m.Insecure() {
		return
	}
	clk := clock.OrReal(m.cfg.Clock)
	last, _ := os.Stat(m.cfg.KeyringFile)
	for {
		select {
		case <-ctx.Done():
			return
		case <-clk.After(DefaultKeyringCheck):
		}
		fi, err := os.Stat(m.cfg.KeyringFile)
		if err != nil {
			m.log.Warn("keyring file unreadable; keeping the keys in use", "file", m.cfg.KeyringFile, "err", err)
			continue
		}
		if last != nil && os.SameFile(last, fi) && last.ModTime().Equal(fi.ModTime()) && last.Size() == fi.Size() {
			continue
		}
		last = fi
		if err := m.ReloadKeyring(); err != nil {
			m.log.Warn("keyring file changed but does not apply; keeping the keys in use", "file", m.cfg.KeyringFile, "err", err)
			continue
		}
		m.log.Info("keyring reloaded", "file", m.cfg.KeyringFile, "keys", len(*m.keys.Load()))
	}
}

// Scratch creates throwaway material for a cluster in dir: a CA, a
// certificate for each node id, an operator certificate "operator", a
// client certificate "client" and a gateway certificate "gateway", and a
// keyring file (dir/keyring.json).
// It replaces whatever is there: for the demo and tests, never for a
// production CA.
func Scratch(dir, cluster string, nodes ...string) error {
	ids := []pki.Identity{{Role: pki.RoleOperator, Name: "operator"}, {Role: pki.RoleClient, Name: "client"}, {Role: pki.RoleGateway, Name: "gateway"}}
	for _, n := range nodes {
		ids = append(ids, pki.Identity{Role: pki.RoleNode, Name: n})
	}
	if _, err := pki.Bootstrap(dir, cluster, ids...); err != nil {
		return err
	}
	k, err := membership.GenerateKey()
	if err != nil {
		return err
	}
	if err := membership.WriteKeyringFile(keyringPath(dir), [][]byte{k}); err != nil {
		return fmt.Errorf("security: %w", err)
	}
	return nil
}
