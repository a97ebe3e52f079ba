// Package gateway is Neptune's HTTP front door (issue 12): it exposes the
// cluster's services over HTTP/1.1 and HTTP/2 and keeps each subscriber's
// guaranteed request rate with the Gage cores of internal/gage, so that
// clients outside Go reach the cluster and a tenant that floods it takes
// nothing from the others' reservations.
//
// A request goes through, in order:
//
//  1. the route table (Config.Routes): host, path prefix and method pick a
//     service method and how to find the partition (a path segment, a
//     header or a query parameter, read as a number or hashed);
//  2. the gage.Classifier: the API key, else the Host and path rules, name
//     the subscriber who pays; a route may admit only some subscribers;
//  3. the body, capped at Config.MaxBody;
//  4. the scheduler: one gage.Scheduler (credit by default, tag or fifo)
//     owned by one goroutine (loop), per-subscriber FIFO queues inside it;
//     the request waits for its turn, at most max_wait and never past its
//     deadline;
//  5. the call, through the Neptune client (Caller), which sends it to the
//     replica Neptune's own balancer picks; the usage the gateway measured
//     goes back to the scheduler, which corrects what it charged.
//
// Routes marked stream carry a bidirectional stream with one replica
// (stream.go): a POST whose body and answer are newline-delimited JSON
// frames (adapter.FrameReader), full duplex, or a WebSocket. The open and
// every message take a turn as a request does; a message refused its
// turn is answered with an error frame naming it and the stream goes on;
// the last frame says how the stream ended, for a write stream which
// messages were applied.
//
// Routes marked passthrough carry whole HTTP messages to a passthrough
// method of an HTTP-adapter service (see adapter.MarshalRequest): the
// program behind it sees the client's method, path, query, headers and
// body, and the client gets the program's status, headers and body, so a
// cluster of unmodified web programs looks like one web server.
//
// Why one goroutine owns the scheduler rather than a lock around it: the
// cores are deterministic state machines on explicit time, and the loop is
// where time comes in; it sleeps on the injected clock until the
// scheduler's Wake, so the same code runs on the wall clock and, in tests,
// on a manual clock stepped without sleeps.
//
// Beyond the request path: every call names its subscriber and the node
// answers with what the request used (see Gateway), which is what the
// scheduler is told; the nodes' accounting cycles, carried on the same
// answers, feed a gage.CapacityEstimator (cluster); and with peers the
// gateways gossip each subscriber's demand over UDP (gossiper; each
// datagram authenticated under the cluster keyring, gossipauth.go) and
// split reservations and capacity with a gage.Splitter every gossip
// period.
// Status and /api/subscribers report it all per subscriber.
package gateway
