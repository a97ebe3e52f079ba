package transport

import (
	"context"
	"errors"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/neptune-cluster/neptune/internal/nerr"
)

// errorDomain marks the ErrorInfo details Neptune attaches to its statuses.
const errorDomain = "neptune"

var wireErrors = []struct {
	err    error
	code   codes.Code
	reason string
}{
	// First: an unknown outcome wraps the failure behind it, which must not
	// decide the code.
	{nerr.ErrUnknownOutcome, codes.Unavailable, "UNKNOWN_OUTCOME"},
	{nerr.ErrUnknownService, codes.NotFound, "UNKNOWN_SERVICE"},
	{nerr.ErrUnknownPartition, codes.NotFound, "UNKNOWN_PARTITION"},
	{nerr.ErrUnknownMethod, codes.Unimplemented, "UNKNOWN_METHOD"},
	{nerr.ErrWrongMode, codes.InvalidArgument, "WRONG_MODE"},
	{nerr.ErrNoReplica, codes.Unavailable, "NO_REPLICA"},
	{nerr.ErrNoPrimary, codes.Unavailable, "NO_PRIMARY"},
	{nerr.ErrDeadline, codes.DeadlineExceeded, "DEADLINE"},
	{nerr.ErrOverloaded, codes.ResourceExhausted, "OVERLOADED"},
	{nerr.ErrClosed, codes.Unavailable, "CLOSED"},
	{nerr.ErrTooLarge, codes.InvalidArgument, "TOO_LARGE"},
}

// ToStatus turns a handler or runtime error into a gRPC status error that
// FromStatus can map back to the same Neptune error on the other side.
func ToStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isNeptune(err) {
		return err
	}
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return withReason(w.code, w.reason, err.Error())
		}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return withReason(codes.DeadlineExceeded, "DEADLINE", err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return withReason(codes.Unknown, "APPLICATION", err.Error(), kindOf(err)...)
}

// appKinds are the kinds of a handler's own error that cross the wire
// (ErrorInfo metadata "kind"; a peer that does not know it ignores it).
var appKinds = []struct {
	err  error
	name string
}{
	{nerr.ErrBadRequest, "bad_request"},
	{nerr.ErrNotFound, "not_found"},
}

// kindOf is the metadata of a handler error's kind, if it has one.
func kindOf(err error) []string {
	for _, k := range appKinds {
		if errors.Is(err, k.err) {
			return []string{"kind", k.name}
		}
	}
	return nil
}

func isNeptune(err error) bool {
	for _, w := range wireErrors {
		if errors.Is(err, w.err) {
			return true
		}
	}
	return false
}

func withReason(c codes.Code, reason, msg string, meta ...string) error {
	st := status.New(c, msg)
	info := &errdetails.ErrorInfo{Domain: errorDomain, Reason: reason}
	if len(meta) == 2 {
		info.Metadata = map[string]string{meta[0]: meta[1]}
	}
	if d, err := st.WithDetails(info); err == nil {
		st = d
	}
	return st.Err()
}

// RemoteError is an error a remote handler returned; Message is its text.
// Kind is the error's kind when the handler wrapped one (ErrBadRequest,
// ErrNotFound): errors.Is matches it.
type RemoteError struct {
	Node    string
	Message string
	Kind    error
}

// Is matches the kind the handler gave its error.
func (e *RemoteError) Is(target error) bool { return e.Kind != nil && target == e.Kind }

func (e *RemoteError) Error() string { return "neptune: remote " + e.Node + ": " + e.Message }

// FromStatus maps a gRPC error from node back to a Neptune error. Neptune
// errors come back as themselves, wrapped with the remote message; transport
// failures become ErrNoReplica wrapping the cause so callers can retry.
func FromStatus(node string, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		info, ok := d.(*errdetails.ErrorInfo)
		if !ok || info.Domain != errorDomain {
			continue
		}
		for _, w := range wireErrors {
			if w.reason == info.Reason {
				return &wireError{sentinel: w.err, node: node, msg: st.Message()}
			}
		}
		if info.Reason == "APPLICATION" {
			re := &RemoteError{Node: node, Message: st.Message()}
			for _, k := range appKinds {
				if info.Metadata["kind"] == k.name {
					re.Kind = k.err
				}
			}
			return re
		}
	}
	switch st.Code() {
	case codes.DeadlineExceeded:
		return &wireError{sentinel: nerr.ErrDeadline, node: node, msg: st.Message()}
	case codes.Canceled:
		return context.Canceled
	case codes.Unavailable:
		w := &wireError{sentinel: nerr.ErrNoReplica, node: node, msg: st.Message(), transport: true}
		if why := foreignHandshake(st.Message()); why != "" {
			w.also, w.msg = nerr.ErrNotMember, why+": "+st.Message()
		}
		return w
	case codes.ResourceExhausted:
		// gRPC's own size limits (the receiver's, on a body far over the
		// node's MaxMessageBytes) answer before the node sees the call:
		// the call never ran.
		if strings.Contains(st.Message(), "larger than max") {
			return &wireError{sentinel: nerr.ErrTooLarge, node: node, msg: st.Message() + "; the call never ran"}
		}
	}
	return &RemoteError{Node: node, Message: st.Message()}
}

// IsTransport reports whether err is a failure to reach the node rather
// than an answer from it.
func IsTransport(err error) bool {
	var w *wireError
	return errors.As(err, &w) && w.transport
}

// foreignHandshake says in words why a connection's TLS handshake failed
// if the two ends trust different CAs, or "" if it failed otherwise.
func foreignHandshake(msg string) string {
	switch {
	case strings.Contains(msg, "certificate signed by unknown authority"):
		return nerr.ErrNotMember.Error() + ": the node's certificate is of a CA this member does not trust (this member holds another cluster's ca.pem)"
	case strings.Contains(msg, "tls: unknown certificate authority"), strings.Contains(msg, "tls: bad certificate"):
		return nerr.ErrNotMember.Error() + ": the node refused this member's certificate (not issued by the cluster's CA)"
	}
	return ""
}

type wireError struct {
	sentinel  error
	node, msg string
	transport bool
	// also is a second error the failure is (ErrNotMember).
	also error
}

func (e *wireError) Error() string {
	if e.msg == e.sentinel.Error() {
		return e.msg + " (node " + e.node + ")"
	}
	return e.sentinel.Error() + " (node " + e.node + "): " + e.msg
}

func (e *wireError) Unwrap() []error {
	if e.also != nil {
		return []error{e.sentinel, e.also}
	}
	return []error{e.sentinel}
}
