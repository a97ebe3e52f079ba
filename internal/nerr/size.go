package nerr

import "errors"

// ErrTooLarge: a request or response body exceeds the configured message
// limit (NodeConfig/ClientConfig MaxMessageBytes). A request refused with
// it never ran; it is not retryable (the same body is refused again).
var ErrTooLarge = errors.New("neptune: message too large")

// DefaultMaxMessageBytes is the default limit on a request or response
// body.
const DefaultMaxMessageBytes = 16 << 20

// MaxMessageBytes is the largest gRPC message a node sends or accepts, the
// ceiling of NodeConfig.MaxMessageBytes. gRPC's default of 4 MiB would
// refuse a large request body or a replication batch of large writes; the
// limit stays as a guard against runaway messages.
const MaxMessageBytes = 64 << 20

// WireOverhead is what a call's envelope may add to its body; gRPC's
// message limits are the body limit plus this, so a body just over the
// limit gets ErrTooLarge rather than a transport error.
const WireOverhead = 64 << 10

// DefaultMaxInflightBytes is the default budget of request bytes a node
// holds in flight at once (NodeConfig.MaxInflightBytes): a call beyond it
// is refused with ErrOverloaded before its body is read, so it never ran.
const DefaultMaxInflightBytes = 64 << 20
