package neptune

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/membership"
	"github.com/neptune-cluster/neptune/internal/nerr"
	"github.com/neptune-cluster/neptune/internal/replica"
	"github.com/neptune-cluster/neptune/internal/replica/wal"
	"github.com/neptune-cluster/neptune/internal/transport"
	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// The node shell of replication: one event loop per hosted replicated
// partition drives a replica.Replica over its pebble write log, exchanges
// its messages with the other replicas through the Replicate RPC (batched
// per destination node by one sender goroutine each), feeds it liveness and
// executes its writes through the service's dispatch pool.

const (
	// tickEvery is how often each partition loop ticks its replica.
	tickEvery = 10 * time.Millisecond
	// replSuspectFor is how long a peer that failed suspectAfter calls in a
	// row, or a primary silent for AckTimeout, counts as dead unless heard
	// from.
	replSuspectFor = time.Second
	// suspectAfter failed calls in a row make a peer suspect: one call that
	// timed out on a busy peer used to start an election nobody needed; a
	// killed peer refuses the next call at once.
	suspectAfter = 2
	// peerQueueLimit and peerQueueBytes bound the messages queued to one
	// node; older ones are dropped (the protocol retransmits). A message
	// may carry MaxBatch entries, so the count alone bounds no memory.
	peerQueueLimit = 4096
	peerQueueBytes = 32 << 20
	// replBatchBytes caps one Replicate call, well under gRPC's default
	// 4 MiB receive limit, which would refuse a whole backlog at once.
	replBatchBytes = 1 << 20
	// forwardedKey marks a call forwarded to the primary, so it is not
	// forwarded again.
	forwardedKey = "neptune-forwarded"
)

// replNode is a node's replication runtime.
type replNode struct {
	n     *Node
	parts map[partKey]*replPart // fixed after Register

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	peers   map[string]*peerQueue
	suspect map[string]time.Time
	heard   map[string]time.Time
	// failed counts a peer's calls that failed in a row.
	failed map[string]int
}

type partKey struct {
	service   string
	partition int32
}

// replPart is one hosted replica of a partition.
type replPart struct {
	rn   *replNode
	h    *hosted
	key  partKey
	cfg  replica.Config
	self string

	inbox chan replica.Message
	props chan proposal
	ops   chan func(time.Time)
	done  chan struct{} // closed when the loop exits

	status atomic.Pointer[replica.Status]

	// Loop-owned.
	log     *wal.Log
	core    *replica.Replica
	pending map[uint64]chan writeResult
	nextReq uint64
	results map[uint64]writeResult
}

type proposal struct {
	method string
	body   []byte
	reply  chan writeResult
}

type writeResult struct {
	resp *Response
	err  error
}

// registerReplicated prepares h's replicas; the loops start with the node.
func (n *Node) registerReplicated(h *hosted) error {
	r := h.svc.Replication
	if n.cfg.DataDir == "" {
		return fmt.Errorf("neptune: register %q: NodeConfig.DataDir is required to host a replicated service", h.svc.Name)
	}
	if n.repl == nil {
		n.repl = &replNode{n: n, parts: map[partKey]*replPart{}, peers: map[string]*peerQueue{},
			suspect: map[string]time.Time{}, heard: map[string]time.Time{}, failed: map[string]int{}}
	}
	for _, p := range h.partitions {
		specs := r.ReplicasOf(int(p))
		if !slices.ContainsFunc(specs, func(s ReplicaSpec) bool { return s.Node == n.cfg.ID }) {
			return fmt.Errorf("neptune: register %q partition %d: %w %q (replicas: %v)", h.svc.Name, p, errNoReplicaSet, n.cfg.ID, specs)
		}
		cfg := replica.Config{ID: replica.ID(n.cfg.ID), Level: replica.Level(r.Level), MinLive: r.MinLive,
			Heartbeat: r.Heartbeat, AckTimeout: r.AckTimeout, ElectionTimeout: r.ElectionTimeout,
			WriteWait: r.WriteWait, Staleness: r.Staleness}
		for _, s := range specs {
			cfg.Replicas = append(cfg.Replicas, replica.Peer{ID: replica.ID(s.Node), Priority: s.Priority})
		}
		if err := cfg.Validate(); err != nil {
			return fmt.Errorf("neptune: register %q partition %d: %w", h.svc.Name, p, err)
		}
		if cfg.AckTimeout == 0 {
			cfg.AckTimeout = 500 * time.Millisecond // replica's default, needed by the failure detector
		}
		k := partKey{h.svc.Name, p}
		rp := &replPart{rn: n.repl, h: h, key: k, cfg: cfg, self: n.cfg.ID,
			inbox: make(chan replica.Message, 4096), props: make(chan proposal, 1024),
			ops: make(chan func(time.Time), 16), done: make(chan struct{})}
		// Calls may arrive before Start finishes: they see a recovering replica.
		rp.status.Store(&replica.Status{ID: cfg.ID, Role: replica.Recovering, Phase: replica.PhaseCheck})
		n.repl.parts[k] = rp
	}
	return nil
}

// startReplication opens every replica's log and starts its loop.
func (n *Node) startReplication() error {
	rn := n.repl
	if rn == nil {
		return nil
	}
	rn.ctx, rn.cancel = context.WithCancel(context.Background())
	for _, p := range rn.parts {
		dir := filepath.Join(n.cfg.DataDir, p.key.service, strconv.Itoa(int(p.key.partition)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("neptune: data dir: %w", err)
		}
		l, err := wal.Open(dir)
		if err != nil {
			return fmt.Errorf("neptune: %s partition %d: %w", p.key.service, p.key.partition, err)
		}
		rs, err := l.Restore()
		if err == nil {
			p.core, err = replica.New(p.cfg, rs)
		}
		if err != nil {
			_ = l.Close()
			return fmt.Errorf("neptune: %s partition %d: %w", p.key.service, p.key.partition, err)
		}
		p.log = l
		p.pending = map[uint64]chan writeResult{}
		// Request ids must not repeat across restarts: old entries in the
		// log carry this replica's earlier ids.
		p.nextReq = uint64(time.Now().UnixNano())
		st := p.core.Status()
		p.status.Store(&st)
	}
	for _, p := range rn.parts {
		rn.wg.Add(1)
		go func() { defer rn.wg.Done(); p.run(rn.ctx) }()
	}
	return nil
}

// stopReplication stops the loops and closes the logs.
func (n *Node) stopReplication() {
	rn := n.repl
	if rn == nil || rn.cancel == nil {
		return
	}
	rn.cancel()
	rn.wg.Wait()
	for _, p := range rn.parts {
		if p.log != nil {
			_ = p.log.Close()
		}
	}
}

// ---- the partition loop ----

func (p *replPart) run(ctx context.Context) {
	defer close(p.done)
	tick := time.NewTicker(tickEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.failPending(nerr.ErrClosed)
			return
		case pr := <-p.props:
			p.propose(pr)
		case m := <-p.inbox:
			p.core.Step(time.Now(), m)
		case f := <-p.ops:
			f(time.Now())
		case <-tick.C:
			p.feedAlive(time.Now())
			p.core.Tick(time.Now())
		}
		p.drain()
		if err := p.process(ctx); err != nil {
			p.rn.n.log.Error("replication stopped", "service", p.key.service, "partition", p.key.partition, "err", err)
			p.failPending(err)
			return
		}
	}
}

// drain takes whatever else is queued so one Ready (one fsync) covers it.
func (p *replPart) drain() {
	for range 512 {
		select {
		case pr := <-p.props:
			p.propose(pr)
		case m := <-p.inbox:
			p.core.Step(time.Now(), m)
		default:
			return
		}
	}
}

func (p *replPart) propose(pr proposal) {
	p.nextReq++
	p.pending[p.nextReq] = pr.reply
	p.core.Propose(time.Now(), replica.Write{ReqID: p.nextReq, Method: pr.method, Body: pr.body})
}

func (p *replPart) failPending(err error) {
	for id, ch := range p.pending {
		ch <- writeResult{err: err}
		delete(p.pending, id)
	}
}

// process handles Ready batches in the order replica.Ready documents.
func (p *replPart) process(ctx context.Context) error {
	for range 64 {
		rd := p.core.Ready()
		if rd.Empty() {
			break
		}
		if err := p.log.Persist(&rd); err != nil {
			return err
		}
		for _, e := range rd.Check {
			p.core.Checked(e.LSN, p.check(ctx, e.LSN)) // reissues come in the next Ready
		}
		if err := p.apply(ctx, rd.Apply); err != nil {
			return err
		}
		for _, m := range rd.Messages {
			p.rn.send(p.key, m)
		}
		for _, r := range rd.Replies {
			ch, ok := p.pending[r.ReqID]
			if !ok {
				continue
			}
			delete(p.pending, r.ReqID)
			ch <- p.result(r)
		}
		clear(p.results)
		p.core.Advance(rd)
	}
	st := p.core.Status()
	p.status.Store(&st)
	return nil
}

// check asks the service whether it completed the write at lsn. Without a
// Check callback, or if it keeps failing, the write is reissued (handlers
// of such services must then tolerate a repeat).
func (p *replPart) check(ctx context.Context, lsn replica.LSN) bool {
	f := p.h.svc.Check
	if f == nil {
		return false
	}
	for attempt := range 3 {
		ok, err := f(ctx, int(p.key.partition), uint64(lsn))
		if err == nil {
			return ok
		}
		p.rn.n.log.Warn("CHECK failed", "service", p.key.service, "partition", p.key.partition, "lsn", lsn, "attempt", attempt, "err", err)
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// apply executes committed writes in order, one at a time, through the
// service's pool (retrying while the pool refuses: a write cannot be
// skipped), and records the executed marker lazily.
func (p *replPart) apply(ctx context.Context, es []replica.Entry) error {
	var last replica.LSN
	for _, e := range es {
		last = e.LSN
		if e.Method == "" {
			continue
		}
		m := p.h.methods[e.Method]
		if m == nil || m.Handler == nil {
			p.rn.n.log.Error("replicated write names no handler", "service", p.key.service, "method", e.Method)
			continue
		}
		req := &Request{Service: p.key.service, Partition: int(p.key.partition), Method: e.Method, Mode: Write, Body: e.Body, LSN: uint64(e.LSN)}
		var res writeResult
		for {
			err := p.h.run(ctx, "", func(ctx context.Context) *Response {
				res.resp, res.err = runHandler(ctx, m.Handler, req)
				return res.resp
			})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(time.Millisecond)
		}
		if e.Origin == replica.ID(p.self) && e.ReqID != 0 {
			if p.results == nil {
				p.results = map[uint64]writeResult{}
			}
			if res.resp == nil && res.err == nil {
				res.resp = &Response{}
			}
			if res.resp != nil {
				res.resp.Version = uint64(e.LSN)
			}
			p.results[e.ReqID] = res
		}
	}
	if last > 0 {
		return p.log.SetApplied(last, false)
	}
	return nil
}

func (p *replPart) result(r replica.Reply) writeResult {
	if r.Err != nil {
		var np *replica.NotPrimaryError
		if errors.As(r.Err, &np) {
			return writeResult{err: r.Err}
		}
		return writeResult{err: fmt.Errorf("%w: %w", nerr.ErrNoPrimary, r.Err)}
	}
	if res, ok := p.results[r.ReqID]; ok {
		return res
	}
	return writeResult{resp: &Response{Version: uint64(r.LSN)}}
}

// feedAlive tells the replica which peers are alive: announced in the
// yellow pages (or heard from lately) and not suspected by the fast
// failure detector.
func (p *replPart) feedAlive(now time.Time) {
	look := p.rn.n.gossip.Replicas(p.key.service, p.key.partition)
	primary := string(p.status.Load().Primary)
	for _, peer := range p.cfg.Replicas {
		id := string(peer.ID)
		if id == p.self {
			continue
		}
		announced := slices.ContainsFunc(look.Replicas, func(r membership.Replica) bool { return r.Node == id })
		p.core.SetAlive(peer.ID, p.rn.alive(id, now, announced, id == primary, p.cfg.AckTimeout))
	}
}

// ---- failure detection and messaging ----

// alive is the fast failure detector. Memberlist takes seconds to declare
// a node dead; here a peer is dead once suspectAfter calls to it in a row
// fail (a killed process refuses connections; a paused one times out),
// and a primary is dead once silent for ackTimeout (it heartbeats every
// Heartbeat). Hearing from a peer clears the suspicion.
func (rn *replNode) alive(node string, now time.Time, announced, isPrimary bool, ackTimeout time.Duration) bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	heard, s := rn.heard[node], rn.suspect[node]
	if isPrimary && !heard.IsZero() && now.Sub(heard) > ackTimeout && s.Before(heard) {
		rn.suspect[node], s = now, now
	}
	if s.After(heard) && now.Sub(s) < replSuspectFor {
		return false
	}
	return announced || now.Sub(heard) < replSuspectFor
}

// noteHeard records a call from node, or one to it that succeeded.
func (rn *replNode) noteHeard(node string) {
	rn.mu.Lock()
	rn.heard[node] = time.Now()
	rn.failed[node] = 0
	rn.mu.Unlock()
}

// noteUnreachable makes node suspect now.
func (rn *replNode) noteUnreachable(node string) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	rn.failed[node] = max(rn.failed[node], suspectAfter)
	rn.suspect[node] = time.Now()
}

// noteFailed records a failed call to node; suspectAfter in a row make it
// suspect.
func (rn *replNode) noteFailed(node string) {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	if rn.failed[node]++; rn.failed[node] >= suspectAfter {
		rn.suspect[node] = time.Now()
	}
}

// peerQueue holds the messages for one destination node.
type peerQueue struct {
	mu    sync.Mutex
	q     []*pb.ReplicaMessage
	sizes []int // encoded size of each q entry
	bytes int   // sum of sizes
	wake  chan struct{}
}

// push queues pm, dropping the oldest messages beyond the count and byte
// bounds (the newest always stays).
func (pq *peerQueue) push(pm *pb.ReplicaMessage) {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	n := proto.Size(pm)
	pq.q, pq.sizes, pq.bytes = append(pq.q, pm), append(pq.sizes, n), pq.bytes+n
	drop := 0
	for len(pq.q)-drop > 1 && (len(pq.q)-drop > peerQueueLimit || pq.bytes > peerQueueBytes) {
		pq.bytes -= pq.sizes[drop]
		drop++
	}
	if drop > 0 {
		pq.q = slices.Delete(pq.q, 0, drop)
		pq.sizes = slices.Delete(pq.sizes, 0, drop)
	}
}

// take removes the oldest messages totalling at most maxBytes (at least one,
// if any) for one Replicate call.
func (pq *peerQueue) take(maxBytes int) []*pb.ReplicaMessage {
	pq.mu.Lock()
	defer pq.mu.Unlock()
	n, size := 0, 0
	for n < len(pq.q) && (n == 0 || size+pq.sizes[n] <= maxBytes) {
		size += pq.sizes[n]
		n++
	}
	batch := slices.Clone(pq.q[:n])
	pq.q = slices.Delete(pq.q, 0, n)
	pq.sizes = slices.Delete(pq.sizes, 0, n)
	pq.bytes -= size
	return batch
}

func (rn *replNode) send(k partKey, m replica.Message) {
	to := string(m.To)
	rn.mu.Lock()
	pq, ok := rn.peers[to]
	if !ok {
		pq = &peerQueue{wake: make(chan struct{}, 1)}
		rn.peers[to] = pq
		rn.wg.Add(1)
		go func() { defer rn.wg.Done(); rn.sender(to, pq) }()
	}
	rn.mu.Unlock()
	pq.push(toPBMessage(k, m))
	select {
	case pq.wake <- struct{}{}:
	default:
	}
}

// sender delivers one node's queue in FIFO batches, one call at a time.
func (rn *replNode) sender(to string, pq *peerQueue) {
	for {
		select {
		case <-rn.ctx.Done():
			return
		case <-pq.wake:
		}
		for {
			batch := pq.take(replBatchBytes)
			if len(batch) == 0 {
				break
			}
			if err := rn.deliver(to, batch); err != nil {
				rn.noteFailed(to)
				rn.n.log.Debug("replicate failed", "peer", to, "messages", len(batch), "err", err)
			} else {
				rn.noteHeard(to)
			}
		}
	}
}

func (rn *replNode) deliver(to string, batch []*pb.ReplicaMessage) error {
	addr := rn.n.rpcAddrOf(to)
	if addr == "" {
		return fmt.Errorf("%w: node %q is not in the yellow pages", nerr.ErrNoReplica, to)
	}
	cl, err := rn.n.client.conns.Client(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(rn.ctx, 300*time.Millisecond)
	defer cancel()
	_, err = cl.Replicate(ctx, &pb.ReplicaBatch{From: rn.n.cfg.ID, Messages: batch})
	return err
}

// rpcAddrOf finds a node's RPC address in the yellow pages.
func (n *Node) rpcAddrOf(node string) string {
	for _, e := range n.gossip.Snapshot() {
		if e.Ann.NodeId == node {
			return e.Ann.RpcAddr
		}
	}
	return ""
}

// Replicate receives replication messages from another node.
func (s *nodeServer) Replicate(_ context.Context, in *pb.ReplicaBatch) (*pb.ReplicaBatchAck, error) {
	rn := s.n.repl
	if rn == nil {
		return nil, transport.ToStatus(fmt.Errorf("%w: node %s hosts no replicated service", nerr.ErrUnknownService, s.n.cfg.ID))
	}
	rn.noteHeard(in.From)
	for _, pm := range in.Messages {
		p, ok := rn.parts[partKey{pm.Service, pm.Partition}]
		if !ok {
			continue
		}
		select {
		case p.inbox <- fromPBMessage(pm):
		default: // full: dropped, the protocol retransmits
		}
	}
	return &pb.ReplicaBatchAck{}, nil
}

// Promote is the operator's `neptune partition promote`.
func (s *nodeServer) Promote(ctx context.Context, in *pb.PromoteRequest) (*pb.PromoteReply, error) {
	p, err := s.n.replPart(in.Service, in.Partition)
	if err != nil {
		return nil, transport.ToStatus(err)
	}
	done := make(chan replica.Status, 1)
	op := func(now time.Time) {
		p.core.Promote(now)
		done <- p.core.Status()
	}
	select {
	case p.ops <- op:
	case <-ctx.Done():
		return nil, transport.ToStatus(ctx.Err())
	}
	select {
	case st := <-done:
		return &pb.PromoteReply{Status: toPBStatus(in.Partition, p.cfg.Level, st)}, nil
	case <-ctx.Done():
		return nil, transport.ToStatus(ctx.Err())
	case <-p.done:
		return nil, transport.ToStatus(nerr.ErrClosed)
	}
}

func (n *Node) replPart(service string, partition int32) (*replPart, error) {
	if n.repl != nil {
		if p, ok := n.repl.parts[partKey{service, partition}]; ok {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w %d of replicated service %q on node %s", nerr.ErrUnknownPartition, partition, service, n.cfg.ID)
}

// ---- serving calls on replicated partitions ----

// serveReplicated runs a call on a replicated partition: writes go through
// the replica (forwarded to the primary if this is not it), reads are
// served here if this replica may, else by the primary.
func (n *Node) serveReplicated(ctx context.Context, h *hosted, m *Method, in *pb.CallRequest) (*Response, error) {
	p, err := n.replPart(in.Service, in.Partition)
	if err != nil {
		return nil, err
	}
	if Mode(in.Mode) == Write {
		res, err := p.write(ctx, in)
		var np *replica.NotPrimaryError
		if errors.As(err, &np) {
			return n.forward(ctx, string(np.Primary), in)
		}
		return res, err
	}
	st := p.status.Load()
	if st.Role == replica.Recovering || (p.cfg.Level == replica.Level3 && uint64(st.Applied) < in.MinVersion) {
		if string(st.Primary) != n.cfg.ID {
			return n.forward(ctx, string(st.Primary), in)
		}
		// This is the primary, but a new one may still be applying the
		// writes it committed: a session's read must not see less than it
		// already saw (read-your-writes, monotonic reads).
		if st, err = p.awaitApplied(ctx, in.MinVersion); err != nil {
			return nil, err
		}
	}
	resp, err := h.serveLocal(ctx, m, in)
	if err != nil {
		return nil, err
	}
	if resp.Version == 0 {
		resp.Version = uint64(st.Applied) // what the read reflects at least
	}
	return resp, nil
}

// awaitApplied waits until this replica has applied version v, for at most
// maxApplyWait; after that the read fails with the retryable ErrNoPrimary.
func (p *replPart) awaitApplied(ctx context.Context, v uint64) (*replica.Status, error) {
	deadline := time.Now().Add(maxApplyWait)
	for {
		st := p.status.Load()
		if uint64(st.Applied) >= v {
			return st, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s partition %d has applied %d, the session has seen %d", nerr.ErrNoPrimary, p.key.service, p.key.partition, st.Applied, v)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.done:
			return nil, fmt.Errorf("%w: replication of %s partition %d stopped", nerr.ErrClosed, p.key.service, p.key.partition)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// maxApplyWait bounds how long a primary holds a read that needs writes it
// has committed but not yet applied.
const maxApplyWait = time.Second

func (p *replPart) write(ctx context.Context, in *pb.CallRequest) (*Response, error) {
	reply := make(chan writeResult, 1)
	select {
	case p.props <- proposal{method: in.Method, body: in.Body, reply: reply}:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-p.done:
		return nil, fmt.Errorf("%w: replication of %s partition %d stopped", nerr.ErrClosed, p.key.service, p.key.partition)
	}
	select {
	case r := <-reply:
		return r.resp, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// forward sends a call on to the primary, once: a forwarded call that
// still finds no primary fails with the retryable ErrNoPrimary.
func (n *Node) forward(ctx context.Context, primary string, in *pb.CallRequest) (*Response, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if primary == "" || primary == n.cfg.ID || len(md.Get(forwardedKey)) > 0 {
		return nil, fmt.Errorf("%w for %s partition %d at node %s", nerr.ErrNoPrimary, in.Service, in.Partition, n.cfg.ID)
	}
	addr := n.rpcAddrOf(primary)
	if addr == "" {
		return nil, fmt.Errorf("%w: primary %q of %s partition %d is not in the yellow pages", nerr.ErrNoPrimary, primary, in.Service, in.Partition)
	}
	cl, err := n.client.conns.Client(addr)
	if err != nil {
		return nil, err
	}
	out, err := cl.Call(metadata.AppendToOutgoingContext(ctx, forwardedKey, n.cfg.ID), in)
	if err != nil {
		err = transport.FromStatus(primary, err)
		if transport.IsTransport(err) {
			// Suspect at once, not after suspectAfter failures: each write
			// forwarded to a dead primary fails with an outcome the client
			// cannot retry, so the next ones must find the partition
			// between primaries (retryable) instead.
			n.repl.noteUnreachable(primary)
			return nil, fmt.Errorf("%w: primary %q unreachable: %w", nerr.ErrNoPrimary, primary, err)
		}
		return nil, err
	}
	return &Response{Body: out.Body, Version: out.Version}, nil
}

// ---- publishing ----

// replStatus is h's replica status for the announcement.
func (n *Node) replStatus(h *hosted) []*pb.ReplicaStatus {
	if h.svc.Replication == nil || n.repl == nil {
		return nil
	}
	var out []*pb.ReplicaStatus
	for _, part := range h.partitions {
		p := n.repl.parts[partKey{h.svc.Name, part}]
		out = append(out, toPBStatus(part, p.cfg.Level, *p.status.Load()))
	}
	return out
}

// pollVersion answers the replication part of a load poll.
func (n *Node) pollVersion(service string, partition int32) transport.Version {
	if n.repl == nil {
		return transport.Version{}
	}
	p, ok := n.repl.parts[partKey{service, partition}]
	if !ok {
		return transport.Version{}
	}
	st := p.status.Load()
	return transport.Version{Replicated: true, Version: uint64(st.Applied), VersionAgo: uint64(st.VersionAgo),
		Serving: st.Role != replica.Recovering, Primary: st.Role == replica.Primary}
}

func toPBStatus(partition int32, level replica.Level, st replica.Status) *pb.ReplicaStatus {
	return &pb.ReplicaStatus{Partition: partition, Role: int32(st.Role), Phase: int32(st.Phase), Epoch: uint64(st.Epoch),
		Primary: string(st.Primary), Version: uint64(st.Applied), Commit: uint64(st.Commit),
		VersionAgo: uint64(st.VersionAgo), Level: int32(level)}
}

// ---- wire conversion ----

func toPBMessage(k partKey, m replica.Message) *pb.ReplicaMessage {
	pm := &pb.ReplicaMessage{Service: k.service, Partition: k.partition, Type: int32(m.Type), From: string(m.From), To: string(m.To),
		Epoch: uint64(m.Epoch), PrevLsn: uint64(m.PrevLSN), PrevEpoch: uint64(m.PrevEpoch), Commit: uint64(m.Commit),
		Trunc: uint64(m.Trunc), InSync: m.InSync, Lsn: uint64(m.LSN), Reject: m.Reject, Hint: uint64(m.Hint),
		Granted: m.Granted, LastEpoch: uint64(m.LastEpoch)}
	for _, e := range m.Entries {
		pm.Entries = append(pm.Entries, &pb.ReplicaEntry{Epoch: uint64(e.Epoch), Lsn: uint64(e.LSN), Method: e.Method,
			Body: e.Body, Origin: string(e.Origin), ReqId: e.ReqID, Seq: e.Seq})
	}
	if len(m.Versions) > 0 {
		pm.Versions = make(map[string]uint64, len(m.Versions))
		for id, v := range m.Versions {
			pm.Versions[string(id)] = v
		}
	}
	return pm
}

func fromPBMessage(pm *pb.ReplicaMessage) replica.Message {
	m := replica.Message{Type: replica.MsgType(pm.Type), From: replica.ID(pm.From), To: replica.ID(pm.To),
		Epoch: replica.Epoch(pm.Epoch), PrevLSN: replica.LSN(pm.PrevLsn), PrevEpoch: replica.Epoch(pm.PrevEpoch),
		Commit: replica.LSN(pm.Commit), Trunc: replica.LSN(pm.Trunc), InSync: pm.InSync, LSN: replica.LSN(pm.Lsn),
		Reject: pm.Reject, Hint: replica.LSN(pm.Hint), Granted: pm.Granted, LastEpoch: replica.Epoch(pm.LastEpoch)}
	for _, e := range pm.Entries {
		m.Entries = append(m.Entries, replica.Entry{Epoch: replica.Epoch(e.Epoch), LSN: replica.LSN(e.Lsn), Method: e.Method,
			Body: e.Body, Origin: replica.ID(e.Origin), ReqID: e.ReqId, Seq: e.Seq})
	}
	if len(pm.Versions) > 0 {
		m.Versions = make(map[replica.ID]uint64, len(pm.Versions))
		for id, v := range pm.Versions {
			m.Versions[replica.ID(id)] = v
		}
	}
	return m
}
