package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/neptune-cluster/neptune/apps/kv"
	"github.com/neptune-cluster/neptune/apps/listappend"
	"github.com/neptune-cluster/neptune/internal/client"
	"github.com/neptune-cluster/neptune/internal/config"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/security"
	"github.com/neptune-cluster/neptune/internal/transport"
)

// ClientVerb is the hidden `neptune bench` verb a client process runs
// (inside its namespace); it reads a ClientSpec as JSON from stdin.
const ClientVerb = "faults-client"

// ClientSpec is one client process's job.
type ClientSpec struct {
	Name string
	// IP is the client's address (its gossip listener binds there); Join
	// the nodes' gossip addresses.
	IP   string
	Join []string
	// Out is the JSON-lines history file.
	Out string
	// Parts is the partitions of each service; Keys the keys per partition.
	Parts, Keys int
	// Appenders and Registers are concurrent workers of each workload;
	// Readers only read registers (so a client cut off with an old
	// primary keeps reading while its writers wait).
	Appenders, Registers, Readers int
	// ElemBase makes this client's appended elements unique in the run.
	ElemBase uint64
	// MaxOps bounds the operations this client starts (0: none).
	MaxOps   int
	Duration time.Duration
	Seed     uint64
	// Unreplicated: the services are hosted unreplicated (their
	// announcements list no replicas), so the client waits until some
	// node announces both.
	Unreplicated bool
}

// Record is one operation in a history file.
type Record struct {
	// W is the workload operation: append, put or get; or viewSample (K
	// the service, V the nodes the client saw announced as P's primary).
	W string `json:"w"`
	P int    `json:"p"`
	K string `json:"k"`
	// E is the appended element; V the register value written or read.
	E uint64 `json:"e,omitempty"`
	V string `json:"v,omitempty"`
	// O is ok, failed (never executed) or unknown (may have run).
	O string `json:"o"`
	// S and F are the start and end in Unix nanoseconds (one machine clock).
	S int64 `json:"s"`
	F int64 `json:"f"`
	// L is the version the response carried: a write's LSN, the version a
	// read was served at.
	L uint64 `json:"l,omitempty"`
	C string `json:"c"`
	// Err is the last error of a failed or unknown operation.
	Err string `json:"err,omitempty"`
}

// Client runs a client process: reads its spec from in, prints "ready"
// on out once it sees the services, runs the workloads until its duration
// ends, MaxOps ran or SIGTERM, and writes the history.
func Client(ctx context.Context, in io.Reader, out io.Writer) error {
	var spec ClientSpec
	if err := json.NewDecoder(in).Decode(&spec); err != nil {
		return fmt.Errorf("faults client: spec: %w", err)
	}
	ctx, stopSig := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stopSig()
	f, err := os.Create(spec.Out)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	insecure, err := security.Load(security.Config{Insecure: true})
	if err != nil {
		return err
	}
	// The client's calls get their own context: SIGTERM stops new
	// operations, while those in flight finish and are recorded.
	callCtx, cancelCalls := context.WithCancel(context.Background())
	defer cancelCalls()
	c, err := client.New(callCtx, client.Config{Client: config.Client{Host: spec.IP, Join: spec.Join, AnnounceTTL: time.Second},
		ID: spec.Name, AnnounceInterval: 200 * time.Millisecond, Material: insecure})
	if err != nil {
		return err
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	seen := func() bool {
		if !spec.Unreplicated {
			return len(c.Partitions()) >= 2*spec.Parts
		}
		for _, e := range c.Gossip().Snapshot() {
			n := 0
			for _, s := range e.Ann.Services {
				if s.Name == listappend.Name || s.Name == "kv" {
					n++
				}
			}
			if n == 2 {
				return true
			}
		}
		return false
	}
	for !seen() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("faults client %s: services not seen: %+v", spec.Name, c.Partitions())
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintln(out, "ready")
	stop := time.Now().Add(spec.Duration)
	var (
		mu     sync.Mutex
		ops    int
		wg     sync.WaitGroup
		recErr error
	)
	enc := json.NewEncoder(w)
	record := func(r Record) {
		mu.Lock()
		defer mu.Unlock()
		if err := enc.Encode(r); err != nil && recErr == nil {
			recErr = err
		}
	}
	next := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if ctx.Err() != nil || time.Now().After(stop) || (spec.MaxOps > 0 && ops >= spec.MaxOps) {
			return 0, false
		}
		ops++
		return ops, true
	}
	for i := range spec.Appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s-a%d", spec.Name, i)
			for n := uint64(0); ; n++ {
				if _, ok := next(); !ok {
					return
				}
				elem := spec.ElemBase + uint64(i)<<32 + n + 1
				p := int(elem % uint64(spec.Parts))
				key := fmt.Sprintf("p%d-k%d", p, rand.IntN(spec.Keys))
				r := Record{W: "append", P: p, K: key, E: elem, C: name, S: time.Now().UnixNano()}
				r.O, r.L, r.Err = write(callCtx, c, listappend.Name, p, "append", listappend.EncodeAppend(key, elem))
				r.F = time.Now().UnixNano()
				record(r)
			}
		}()
	}
	for i := range spec.Registers + spec.Readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("%s-r%d", spec.Name, i)
			readOnly := i >= spec.Registers
			rng := rand.New(rand.NewPCG(spec.Seed, uint64(i)))
			sess := client.NewSession()
			for n := 0; ; n++ {
				if _, ok := next(); !ok {
					return
				}
				if readOnly {
					time.Sleep(10 * time.Millisecond) // keep the register history small enough to search
				}
				p := rng.IntN(spec.Parts)
				key := fmt.Sprintf("p%d-r%d", p, rng.IntN(spec.Keys))
				r := Record{P: p, K: key, C: name, S: time.Now().UnixNano()}
				if !readOnly && rng.IntN(2) == 0 {
					r.W, r.V = "put", fmt.Sprintf("%s-%d", name, n)
					r.O, r.L, r.Err = write(callCtx, c, "kv", p, "put", []byte(key+"="+r.V), client.WithSession(sess))
				} else {
					r.W = "get"
					r.O, r.V, r.L, r.Err = get(callCtx, c, p, key, sess)
				}
				r.F = time.Now().UnixNano()
				record(r)
			}
		}()
	}
	// The client's yellow pages, sampled: which nodes it sees announced
	// as each partition's primary (how fast a heal settles to one).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil && time.Now().Before(stop) {
			now := time.Now().UnixNano()
			for _, pi := range c.Partitions() {
				var primaries []string
				for _, r := range pi.Replicas {
					if r.Role == "primary" {
						primaries = append(primaries, r.Node)
					}
				}
				record(Record{W: viewSample, K: pi.Service, P: pi.Partition, V: strings.Join(primaries, ","), O: "view", C: spec.Name, S: now, F: now})
			}
			select {
			case <-ctx.Done():
			case <-time.After(viewEvery):
			}
		}
	}()
	wg.Wait()
	if err := w.Flush(); err != nil {
		return err
	}
	return recErr
}

// viewSample records are a client's view of the primaries, taken every
// viewEvery; they are no operations.
const (
	viewSample = "view"
	viewEvery  = 100 * time.Millisecond
)

// write calls a write method, retrying while the error is retryable (the
// write keeps its identity across retries, WithRetryOf) for at most 10 s.
// The outcome is failed only if no attempt may have run.
func write(ctx context.Context, c *client.Client, svc string, p int, method string, body []byte, opts ...client.Option) (outcome string, lsn uint64, errText string) {
	deadline := time.Now().Add(10 * time.Second)
	var err error
	maybeRan := false
	for attempt := 0; time.Now().Before(deadline); attempt++ {
		if attempt > 0 {
			time.Sleep(20 * time.Millisecond)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, e := c.Call(cctx, svc, p, method, body, append(opts, client.WithRetryOf(err))...)
		cancel()
		if e == nil {
			return "ok", resp.Version, ""
		}
		err = e
		maybeRan = maybeRan || errors.Is(err, nerr.ErrUnknownOutcome) || errors.Is(err, context.DeadlineExceeded)
		var remote *transport.RemoteError
		if errors.As(err, &remote) || !nerr.Retryable(err) {
			break
		}
	}
	if maybeRan {
		return "unknown", 0, err.Error()
	}
	return "failed", 0, err.Error()
}

// get reads a register once; "" with ok means absent.
func get(ctx context.Context, c *client.Client, p int, key string, sess *client.Session) (outcome, value string, version uint64, errText string) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	resp, err := c.Call(cctx, "kv", p, "get", []byte(key), client.WithSession(sess))
	switch {
	case err == nil:
		return "ok", string(resp.Body), resp.Version, ""
	case isNotFound(err):
		return "ok", "", 0, ""
	default:
		return "failed", "", 0, err.Error()
	}
}

// isNotFound: the kv store's own answer that the key was never put (any
// other error is a failed read, never an absent key).
func isNotFound(err error) bool {
	var remote *transport.RemoteError
	return errors.As(err, &remote) && strings.HasPrefix(remote.Message, kv.ErrNotFound.Error())
}
