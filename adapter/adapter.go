// Package adapter makes an existing program a Neptune service without
// changing it: an HTTP server in any language (HTTP), or an executable run
// once per request (Exec), the way the dissertation ran BLAST.
//
// Neptune tells the program which partition a request is for and, for
// replicated writes, its LSN: as headers (Neptune-Partition, Neptune-LSN,
// Neptune-Method) for HTTP, as environment variables (NEPTUNE_PARTITION,
// NEPTUNE_LSN, NEPTUNE_METHOD) for executables. A program that records the
// LSN with its data can answer CHECK through the HTTP check route.
package adapter

import (
	"errors"
	"fmt"

	"github.com/neptune-cluster/neptune"
)

// Errors the adapters return, wrapped with the program's own message.
// neptune.ErrDeadline and neptune.ErrOverloaded are used where they apply,
// so that callers can tell a retry may help.
var (
	// ErrBadRequest: the program rejected the request (HTTP 4xx).
	ErrBadRequest = errors.New("adapter: program rejected the request")
	// ErrProgram: the program failed (HTTP 5xx, or a non-zero exit code).
	ErrProgram = errors.New("adapter: program failed")
	// ErrUnreachable: the HTTP program could not be reached or started.
	ErrUnreachable = errors.New("adapter: program unreachable")
)

// MethodConfig maps one Neptune method to the program.
type MethodConfig struct {
	Name string `yaml:"name"`
	// Mode is "read" or "write".
	Mode string `yaml:"mode"`
	// Route is the HTTP path (HTTP only), e.g. /search.
	Route string `yaml:"route"`
	// Verb is the HTTP method (HTTP only, default POST).
	Verb string `yaml:"verb"`
	// Args replace the command's args for this method (Exec only).
	Args []string `yaml:"args"`
	// Passthrough (HTTP only) makes the method carry whole HTTP messages:
	// its request body is a client's request framed as message/http
	// (MarshalRequest), which is sent to the program as it came (method,
	// path, query, headers, body; Route and Verb must be empty), and its
	// response body is the program's answer framed the same way, whatever
	// its status. This is how a gateway exposes a cluster of unmodified
	// web programs as one web server.
	Passthrough bool `yaml:"passthrough"`
	// Stream (HTTP only) makes the method a stream method
	// (Client.OpenStream, a gateway's stream route). A read stream is one
	// request to Route for the whole stream, full duplex: its chunked body
	// is the caller's messages and the answer's body the program's, both
	// newline-delimited JSON frames (AppendFrame: {"data": "text"} or
	// {"base64": "..."}); the program answers as it reads, and ends the
	// stream by ending its answer. A write stream's messages are writes,
	// each sent as one request to Route like a write method's (its
	// Neptune-LSN identifies it), the answer's body being the message's
	// answer.
	Stream bool `yaml:"stream"`
}

// validateMethods checks the common fields; where prefixes messages with
// the YAML path, e.g. "http". A service with aggregation operators
// (operators) may have no methods.
func validateMethods(where string, ms []MethodConfig, operators bool) error {
	if len(ms) == 0 && !operators {
		return fmt.Errorf("%s.methods is empty: map at least one method, or declare aggregate operators", where)
	}
	seen := map[string]bool{}
	for i, m := range ms {
		at := fmt.Sprintf("%s.methods[%d]", where, i)
		if m.Name == "" {
			return fmt.Errorf("%s.name is required", at)
		}
		if seen[m.Name] {
			return fmt.Errorf("%s.name: method %q is listed twice", at, m.Name)
		}
		seen[m.Name] = true
		if _, err := neptune.ParseMode(m.Mode); err != nil {
			return fmt.Errorf("%s.mode: %q is neither read nor write", at, m.Mode)
		}
	}
	return nil
}

// tail keeps the last n bytes of b for an error message.
func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
