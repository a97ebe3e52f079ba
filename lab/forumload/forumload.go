// Package forumload drives the forum service on a running cluster with a
// reader/writer workload (ViewHeaders, ViewMsg, AddMsg over several
// topics), remembers every acknowledged message, and verifies afterwards,
// by reading each replica directly, that every replica holds every
// acknowledged message and that all replicas of a partition are identical.
// The demo and the clustered-forum tests share it.
package forumload

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/forum"
	"github.com/neptune-cluster/neptune/internal/replica/check"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
	"github.com/neptune-cluster/neptune/lab/localcluster"
)

// ErrVerify is returned when replicas disagree or miss an acknowledged
// message.
var ErrVerify = errors.New("forumload: verification failed")

// Config shapes the workload.
type Config struct {
	// Partitions of the forum service (every one gets topics).
	Partitions int
	// TopicsPerPartition is how many topics each partition holds.
	TopicsPerPartition int
	// WriteFraction of calls are AddMsg; the rest split evenly between
	// ViewHeaders and ViewMsg.
	WriteFraction float64
	// CallTimeout bounds each call.
	CallTimeout time.Duration
	// Conns reach each replica directly for Verify; nil is plaintext
	// connections (an insecure cluster). A secured cluster's come from
	// localcluster.Cluster.Conns.
	Conns *transport.Conns
}

// DefaultConfig is 8 partitions of 2 topics each, 20 % writes.
func DefaultConfig() Config {
	return Config{Partitions: 8, TopicsPerPartition: 2, WriteFraction: 0.2, CallTimeout: 2 * time.Second}
}

// Validate names the offending field.
func (c Config) Validate() error {
	switch {
	case c.Partitions < 1:
		return fmt.Errorf("forumload: Partitions must be >= 1, got %d", c.Partitions)
	case c.TopicsPerPartition < 1:
		return fmt.Errorf("forumload: TopicsPerPartition must be >= 1, got %d", c.TopicsPerPartition)
	case c.WriteFraction < 0 || c.WriteFraction > 1:
		return fmt.Errorf("forumload: WriteFraction must be in [0, 1], got %v", c.WriteFraction)
	case c.CallTimeout <= 0:
		return fmt.Errorf("forumload: CallTimeout must be > 0, got %v", c.CallTimeout)
	}
	return nil
}

// Op is one finished call of the workload.
type Op struct {
	Start   time.Time
	Latency time.Duration
	Method  string // AddMsg, ViewHeaders or ViewMsg
	Err     error
	// Stale is a read answered "unknown message/topic" by a secondary that
	// had not yet applied an acknowledged write: level 2 does not promise
	// read-your-writes. Not an error.
	Stale bool
}

// Acked is one acknowledged AddMsg.
type Acked struct {
	Partition int
	Topic     string
	Subject   string // unique per workload
	ID        int64  // 0 if the answer was a replay
}

// Load is one workload over a client; Run may be called from several
// goroutines (one per caller). Safe for concurrent use.
type Load struct {
	cfg    Config
	c      *neptune.Client
	topics [][]string // per partition

	mu    sync.Mutex
	acked []Acked
	ids   map[string][]int64 // topic -> acknowledged ids
}

// New returns a workload over c. Topics are chosen so that every
// partition holds cfg.TopicsPerPartition of them under forum.Partition.
func New(c *neptune.Client, cfg Config) (*Load, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Load{cfg: cfg, c: c, topics: make([][]string, cfg.Partitions), ids: map[string][]int64{}}
	for i, left := 0, cfg.Partitions*cfg.TopicsPerPartition; left > 0; i++ {
		t := fmt.Sprintf("topic-%d", i)
		p := forum.Partition(t, cfg.Partitions)
		if len(l.topics[p]) < cfg.TopicsPerPartition {
			l.topics[p] = append(l.topics[p], t)
			left--
		}
	}
	return l, nil
}

// Topics returns every topic, partition by partition.
func (l *Load) Topics() []string { return slices.Concat(l.topics...) }

// Seed posts a first message to every topic, retrying each until it is
// acknowledged or ctx ends, so that reads find every topic.
func (l *Load) Seed(ctx context.Context) error {
	for _, t := range l.Topics() {
		err := localcluster.Wait(ctx, 0, func(ctx context.Context) error {
			_, err := l.add(ctx, nil, t, 0, "seed", "seed "+t)
			return err
		})
		if err != nil {
			return fmt.Errorf("forumload: seed %s: %w", t, err)
		}
	}
	return nil
}

// Acked returns the acknowledged messages so far.
func (l *Load) Acked() []Acked {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.acked)
}

// Run issues calls until ctx ends and reports each to record (called from
// this goroutine). worker makes the subjects unique and seeds rng choices.
// A call in flight when ctx ends finishes (it has its own timeout), so
// every acknowledged write is recorded.
func (l *Load) Run(ctx context.Context, worker int, rng *rand.Rand, record func(Op)) {
	sess := neptune.NewSession()
	for seq := 0; ctx.Err() == nil; seq++ {
		p := rng.IntN(l.cfg.Partitions)
		topic := l.topics[p][rng.IntN(len(l.topics[p]))]
		callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.CallTimeout)
		op := Op{Start: time.Now()}
		switch x := rng.Float64(); {
		case x < l.cfg.WriteFraction:
			op.Method = "AddMsg"
			var reply int64
			if ids := l.topicIDs(topic); len(ids) > 0 && rng.IntN(2) == 0 {
				reply = ids[rng.IntN(len(ids))]
			}
			_, op.Err = l.add(callCtx, sess, topic, reply, fmt.Sprintf("user%d", worker), fmt.Sprintf("w%d-%d", worker, seq))
		case x < l.cfg.WriteFraction+(1-l.cfg.WriteFraction)/2:
			op.Method = "ViewHeaders"
			_, op.Err = l.c.Call(callCtx, "forum", p, "ViewHeaders", encode(forum.ViewHeadersRequest{Topic: topic}), neptune.WithSession(sess))
		default:
			op.Method = "ViewMsg"
			var id int64 = 1
			if ids := l.topicIDs(topic); len(ids) > 0 {
				id = ids[rng.IntN(len(ids))]
			}
			_, op.Err = l.c.Call(callCtx, "forum", p, "ViewMsg", encode(forum.ViewMsgRequest{ID: id}), neptune.WithSession(sess))
		}
		op.Latency = time.Since(op.Start)
		cancel()
		if op.Err != nil && op.Method != "AddMsg" && isUnknown(op.Err) {
			op.Err, op.Stale = nil, true
		}
		record(op)
	}
}

func isUnknown(err error) bool {
	s := err.Error()
	return strings.Contains(s, forum.ErrUnknownMessage.Error()) || strings.Contains(s, forum.ErrUnknownTopic.Error())
}

func (l *Load) topicIDs(topic string) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ids[topic]
}

// add posts one message and records it once acknowledged.
func (l *Load) add(ctx context.Context, sess *neptune.Session, topic string, replyTo int64, author, subject string) (int64, error) {
	p := forum.Partition(topic, l.cfg.Partitions)
	body := encode(forum.AddMsgRequest{Topic: topic, ReplyTo: replyTo, Author: author, Subject: subject, Body: "body of " + subject})
	resp, err := l.c.Call(ctx, "forum", p, "AddMsg", body, neptune.WithSession(sess))
	if err != nil {
		return 0, err
	}
	var out forum.AddMsgResponse
	if err := json.Unmarshal(resp.Body, &out); err != nil {
		return 0, fmt.Errorf("forumload: AddMsg answered %q: %w", resp.Body, err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked = append(l.acked, Acked{Partition: p, Topic: topic, Subject: subject, ID: out.ID})
	if out.ID != 0 {
		l.ids[topic] = append(l.ids[topic], out.ID)
	}
	return out.ID, nil
}

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the request types always marshal
	}
	return b
}

// PartitionReport is one partition's verified state.
type PartitionReport struct {
	Partition int
	Replicas  []string // node ids
	Digest    forum.DigestResponse
	Acked     int // acknowledged messages, each found on every replica
}

// Verify waits (up to wait) until every forum partition announces degree
// replicas, all serving, that answer the same Digest, reading each replica
// directly rather than through the balancer; it then reads every topic's
// headers from each replica and checks that every acknowledged message is
// on every replica. Call it after the workload stopped. Errors wrap
// ErrVerify when the data is wrong.
func (l *Load) Verify(ctx context.Context, degree int, wait time.Duration) ([]PartitionReport, error) {
	conns := l.cfg.Conns
	if conns == nil {
		conns = transport.NewConns()
		defer conns.Close()
	}
	deadline := time.Now().Add(wait)
	var (
		reports []PartitionReport
		addrs   map[string]string
		last    error
	)
	var have []map[string]map[string]bool
	for {
		reports, addrs, last = l.converged(ctx, conns, degree)
		if last == nil {
			// A replica may know no primary for a moment between the
			// digests and the reads (a lease renewed late on a loaded
			// machine, a restarted replica not yet told its primary): a
			// retryable refusal is a state that passes, not a verdict.
			if have, last = l.read(ctx, conns, reports, addrs); last == nil {
				break
			}
			if !neptune.Retryable(last) {
				return nil, last
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%w: replicas did not converge within %v: %w", ErrVerify, wait, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
	byPart := map[int][]string{}
	for _, a := range l.Acked() {
		byPart[a.Partition] = append(byPart[a.Partition], a.Topic+"/"+a.Subject)
	}
	for i, r := range reports {
		if vs := check.Durability(byPart[r.Partition], have[i]); len(vs) > 0 {
			return nil, fmt.Errorf("%w: partition %d: %d acknowledged messages missing, first: %v", ErrVerify, r.Partition, len(vs), vs[0])
		}
		reports[i].Acked = len(byPart[r.Partition])
	}
	return reports, nil
}

// read collects, for each partition's report, the subjects every replica
// holds, read from each replica directly.
func (l *Load) read(ctx context.Context, conns *transport.Conns, reports []PartitionReport, addrs map[string]string) ([]map[string]map[string]bool, error) {
	out := make([]map[string]map[string]bool, len(reports))
	for i, r := range reports {
		have := map[string]map[string]bool{}
		for _, node := range r.Replicas {
			got := map[string]bool{}
			for _, t := range l.topics[r.Partition] {
				b, err := direct(ctx, conns, node, addrs[node], r.Partition, "ViewHeaders", encode(forum.ViewHeadersRequest{Topic: t}))
				if err != nil {
					return nil, fmt.Errorf("forumload: ViewHeaders %s on %s: %w", t, node, err)
				}
				var h forum.ViewHeadersResponse
				if err := json.Unmarshal(b, &h); err != nil {
					return nil, fmt.Errorf("forumload: ViewHeaders on %s answered %q: %w", node, b, err)
				}
				walk(h.Threads, func(x forum.Header) { got[t+"/"+x.Subject] = true })
			}
			have[node] = got
		}
		out[i] = have
	}
	return out, nil
}

func walk(hs []forum.Header, f func(forum.Header)) {
	for _, h := range hs {
		f(h)
		walk(h.Replies, f)
	}
}

// converged reads every replica's digest once; it returns an error (not
// wrapping ErrVerify: it may yet converge) until all replicas of each
// partition are announced serving and agree.
func (l *Load) converged(ctx context.Context, conns *transport.Conns, degree int) ([]PartitionReport, map[string]string, error) {
	addrs := map[string]string{}
	for _, m := range l.c.Members(ctx, 0) {
		addrs[m.Node] = m.RPCAddr
	}
	parts := map[int]neptune.PartitionInfo{}
	for _, pi := range l.c.Partitions() {
		if pi.Service == "forum" {
			parts[pi.Partition] = pi
		}
	}
	var out []PartitionReport
	for p := range l.cfg.Partitions {
		pi := parts[p]
		if len(pi.Replicas) != degree {
			return nil, nil, fmt.Errorf("partition %d: %d replicas announced, want %d", p, len(pi.Replicas), degree)
		}
		r := PartitionReport{Partition: p}
		digests := map[string]string{}
		for _, ri := range pi.Replicas {
			if ri.Role == "recovering" {
				return nil, nil, fmt.Errorf("partition %d: %s is recovering", p, ri.Node)
			}
			b, err := direct(ctx, conns, ri.Node, addrs[ri.Node], p, "Digest", nil)
			if err != nil {
				return nil, nil, fmt.Errorf("partition %d: Digest on %s: %w", p, ri.Node, err)
			}
			digests[ri.Node] = string(b)
			r.Replicas = append(r.Replicas, ri.Node)
			if err := json.Unmarshal(b, &r.Digest); err != nil {
				return nil, nil, fmt.Errorf("partition %d: Digest on %s answered %q: %w", p, ri.Node, b, err)
			}
		}
		if vs := check.Convergence(digests); len(vs) > 0 {
			return nil, nil, fmt.Errorf("partition %d: %v", p, vs[0])
		}
		out = append(out, r)
	}
	return out, addrs, nil
}

// direct calls node at addr, not the balancer: verification must read
// each replica's own copy. With mutual TLS the server must prove it is
// node, so a stale address cannot make another process's copy count as
// node's.
func direct(ctx context.Context, conns *transport.Conns, node, addr string, p int, method string, body []byte) ([]byte, error) {
	if addr == "" {
		return nil, errors.New("node not in the yellow pages")
	}
	cl, err := conns.ClientFor(node, addr)
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := cl.Call(cctx, &pb.CallRequest{Service: "forum", Partition: int32(p), Method: method, Mode: pb.Mode_MODE_READ, Body: body})
	if err != nil {
		return nil, transport.FromStatus(node, err)
	}
	return out.Body, nil
}
