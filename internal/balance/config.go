package balance

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Policy names accepted by Config.Policy.
const (
	NameRandom     = "random"
	NameRoundRobin = "roundrobin"
	NameBroadcast  = "broadcast"
	NamePolling    = "polling"
	NameLocalP2C   = "localp2c"
	NameOracle     = "oracle"
	NamePrequal    = "prequal"
	NameAsync      = "async"
	NamePush       = "push"
	NameAffinity   = "affinity"
)

// Names lists every policy New accepts, in a stable order.
var Names = []string{NameRandom, NameRoundRobin, NameBroadcast, NamePolling, NameLocalP2C, NameOracle, NamePrequal, NameAsync, NamePush, NameAffinity}

// WaitAllCap bounds the wait for poll answers when Config.Discard is
// negative ("wait for every answer"): a dead replica must not stall a
// call forever.
const WaitAllCap = time.Second

// ErrUnknownPolicy is returned by New, Validate and CheckName for a
// Policy name not in Names.
var ErrUnknownPolicy = errors.New("unknown balancing policy")

// CheckName reports whether name is one of Names ("" is the default,
// prequal). It is the one check of a policy's name, for Validate and for
// every config file that names a policy; callers prefix the field.
func CheckName(name string) error {
	if name != "" && !slices.Contains(Names, name) {
		return fmt.Errorf("%w %q (one of %s)", ErrUnknownPolicy, name, strings.Join(Names, ", "))
	}
	return nil
}

// Config selects and tunes the load-balancing policy a client uses to
// pick a replica. It is the one definition: the public API aliases it
// (neptune.Balancing). The zero value is the default: prequal, probing 6
// replicas, reusing answers for 5 ms and discarding those slower than
// 10 ms; zero fields take their defaults (DefaultConfig, WithDefaults).
type Config struct {
	// Policy is one of Names (neptune.BalancingPolicies()): "prequal" (the
	// default), "polling" (the paper's: poll PollSize replicas, pick the
	// shortest queue), "random", "roundrobin", "localp2c" (power of two
	// choices on this client's own outstanding calls), "async" (Prequal's
	// probes off the call path: no call waits for a poll; for clients that
	// call far more often than a request takes), "push" (no poll at all:
	// the replicas push their load to the client on every change, while
	// it keeps calling), "affinity" (calls with an affinity key stay on the
	// key's replica while its load allows; calls without one as prequal),
	// "broadcast" and "oracle" (baselines that expect loads pushed at
	// intervals, which nodes do not send).
	Policy string
	// PollSize is how many distinct replicas the polling policy asks per
	// call (all of them if fewer are candidates). The paper settles on 3.
	PollSize int
	// ProbeSize is prequal's PollSize. It defaults to 6: with 16
	// independent clients at 90% load, 3 polls leave the mean ~1.4× that of
	// join-shortest-queue and 6 bring it under 1.2× (docs/experiments/lb.md).
	ProbeSize int
	// ProbeEnough is how many of prequal's probe answers a call waits for
	// before choosing; the rest arrive late and are pooled for the next
	// calls within ReuseWindow. 0 (the default) waits for all: measured on
	// the real cluster at 90% load, choosing after 3 of 6 answers raised the
	// mean from ~1.2× to 1.46× Oracle, because a client's calls are ~55 ms
	// apart and the pooled late answers are stale by then. It pays only
	// for clients that call more often than ReuseWindow.
	ProbeEnough int
	// Discard is how long a call waits for poll answers before choosing
	// among those that arrived (the paper's 10 ms "discard slow polls",
	// the default); negative waits for every answer, but at most
	// WaitAllCap (a second).
	Discard time.Duration
	// BroadcastInterval is the mean interval at which replicas push their
	// load under the broadcast policy, jittered uniformly in 0.5–1.5× to
	// avoid self-synchronisation. The pushing is the server shell's (or the
	// simulator's) job; the policy only consumes Report.
	BroadcastInterval time.Duration
	// ReuseWindow is how long prequal keeps using a poll answer, corrected
	// by this client's own sends and completions since the answer
	// (default 5 ms).
	ReuseWindow time.Duration
	// ProbeRate, PoolSize, ProbeAge, ProbeReuse and HotQuantile tune the
	// async policy (after Prequal, NSDI'24); zero takes the default. Each
	// call sends ProbeRate asynchronous probes on average (a fraction is
	// rounded at random), so probing follows the request rate. At most
	// PoolSize answers are kept, one per replica, each until it is older
	// than ProbeAge or has chosen ProbeReuse calls. A replica is hot when
	// its requests in flight are at or above the HotQuantile quantile of
	// the pool's.
	ProbeRate   float64
	PoolSize    int
	ProbeAge    time.Duration
	ProbeReuse  int
	HotQuantile float64
	// IdleTokens makes the push policy spend a pushed queue of 0 as a
	// one-use idle token (join-idle-queue), for replicas that tell one
	// client, not all, that they are idle. Off by default: nodes push
	// every change to every subscriber, and then every client holds the
	// same token and spends it at once, a herd (simulated at a 2 ms push
	// delay: 1.18× Oracle with tokens, 1.10× without).
	IdleTokens bool
	// LoadBound is the affinity policy's bounded-load factor: a keyed
	// call goes to the first replica in its key's rendezvous ranking whose
	// load (this client's requests in flight to it, or its fresh polled
	// queue if larger) does not exceed LoadBound × the mean over the
	// candidates with this call, rounded up. 1 balances strictly; higher
	// keeps more keys on their first replica. 0 takes DefaultLoadBound
	// (1.25). ProbeAge is how long a polled queue counts.
	LoadBound float64
}

// DefaultConfig selects prequal, which beat the paper's polling in the
// simulator (docs/experiments/lb.md), and the paper's parameters for the
// other policies: poll 3 replicas and discard answers slower than 10 ms.
func DefaultConfig() Config {
	return Config{
		Policy:            NamePrequal,
		PollSize:          3,
		ProbeSize:         6,
		Discard:           10 * time.Millisecond,
		BroadcastInterval: 100 * time.Millisecond,
		ReuseWindow:       5 * time.Millisecond,
	}
}

// WithDefaults fills c's zero fields from DefaultConfig (a negative
// Discard stays: wait for every answer).
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.Policy == "" {
		c.Policy = d.Policy
	}
	if c.PollSize == 0 {
		c.PollSize = d.PollSize
	}
	if c.ProbeSize == 0 {
		c.ProbeSize = d.ProbeSize
	}
	if c.Discard == 0 {
		c.Discard = d.Discard
	}
	if c.BroadcastInterval == 0 {
		c.BroadcastInterval = d.BroadcastInterval
	}
	if c.ReuseWindow == 0 {
		c.ReuseWindow = d.ReuseWindow
	}
	return c
}

// Validate reports the first invalid field by name (zero fields take
// their defaults, so only a value set wrong fails).
func (c Config) Validate() error {
	if err := CheckName(c.Policy); err != nil {
		return fmt.Errorf("balance: Policy: %w", err)
	}
	c = c.WithDefaults()
	for _, f := range []struct {
		name string
		v    int
	}{{"PollSize", c.PollSize}, {"ProbeSize", c.ProbeSize}, {"ProbeEnough", c.ProbeEnough}} {
		if f.v < 0 {
			return fmt.Errorf("balance: %s must be >= 0 (0: the default), got %d", f.name, f.v)
		}
	}
	if c.BroadcastInterval < 0 {
		return fmt.Errorf("balance: BroadcastInterval must be >= 0 (0: the default), got %v", c.BroadcastInterval)
	}
	if c.ReuseWindow < 0 {
		return fmt.Errorf("balance: ReuseWindow must be >= 0 (0: the default), got %v", c.ReuseWindow)
	}
	switch {
	case c.ProbeRate < 0 || math.IsNaN(c.ProbeRate) || math.IsInf(c.ProbeRate, 0):
		return fmt.Errorf("balance: ProbeRate must be a number >= 0, got %v", c.ProbeRate)
	case c.PoolSize < 0:
		return fmt.Errorf("balance: PoolSize must be >= 0, got %d", c.PoolSize)
	case c.ProbeAge < 0:
		return fmt.Errorf("balance: ProbeAge must be >= 0, got %v", c.ProbeAge)
	case c.ProbeReuse < 0:
		return fmt.Errorf("balance: ProbeReuse must be >= 0, got %d", c.ProbeReuse)
	case !(c.HotQuantile >= 0 && c.HotQuantile <= 1):
		return fmt.Errorf("balance: HotQuantile must be in [0, 1], got %v", c.HotQuantile)
	case c.LoadBound != 0 && !(c.LoadBound >= 1 && !math.IsInf(c.LoadBound, 0)):
		return fmt.Errorf("balance: LoadBound must be 0 (the default, %v) or a number >= 1, got %v", DefaultLoadBound, c.LoadBound)
	}
	return nil
}

// PollWait is the Plan.Wait that Discard stands for: WaitAllCap when
// negative (wait for every answer), the default when zero.
func (c Config) PollWait() time.Duration {
	switch {
	case c.Discard < 0:
		return WaitAllCap
	case c.Discard == 0:
		return DefaultConfig().Discard
	}
	return c.Discard
}

// New builds the policy cfg names. rng is the policy's only source of
// randomness; give each client its own, seeded, for reproducible runs. The
// returned Policy is not safe for concurrent use.
func New(cfg Config, rng *rand.Rand) (Policy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if rng == nil {
		return nil, errors.New("balance: nil rng")
	}
	switch cfg.Policy {
	case NameRandom:
		return &Random{rng: rng}, nil
	case NameRoundRobin:
		return &RoundRobin{}, nil
	case NameBroadcast:
		return &Broadcast{newReported(rng)}, nil
	case NamePolling:
		return &Polling{rng: rng, d: cfg.PollSize, wait: cfg.PollWait()}, nil
	case NameLocalP2C:
		return &LocalP2C{rng: rng, outstanding: map[string]int{}}, nil
	case NameOracle:
		return &Oracle{newReported(rng)}, nil
	case NamePrequal:
		return newPrequal(cfg, rng), nil
	case NameAsync:
		return newAsync(cfg, rng), nil
	case NamePush:
		return newPush(rng, cfg.IdleTokens), nil
	case NameAffinity:
		return newAffinity(cfg, rng), nil
	}
	return nil, fmt.Errorf("balance: %w %q: not implemented yet", ErrUnknownPolicy, cfg.Policy)
}
