package client

import (
	"strconv"
	"sync"

	"github.com/neptune-cluster/neptune/internal/service"
)

// Session is the paper's NeptuneHandle: a caller's identity across calls.
// It records the newest partition version each call returned, which
// consistency level 3 uses for read-your-writes and monotonic reads.
// A Session is safe for concurrent use.
type Session struct {
	mu       sync.Mutex
	versions map[string]uint64
}

// NewSession returns an empty session.
func NewSession() *Session { return &Session{versions: map[string]uint64{}} }

// Version is the newest version of service's partition this session saw.
func (s *Session) Version(service string, partition int) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.versions[sessionKey(service, partition)]
}

func (s *Session) observe(service string, partition int, v uint64) {
	if s == nil || v == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := sessionKey(service, partition)
	s.versions[k] = max(s.versions[k], v)
}

// floor is the version a read must be served at: the session's newest seen
// version (consistency level 3 enforces it; other levels ignore it).
func (s *Session) floor(svc string, partition int, mode service.Mode) uint64 {
	if s == nil || mode != service.Read {
		return 0
	}
	return s.Version(svc, partition)
}

func sessionKey(service string, partition int) string {
	return service + "/" + strconv.Itoa(partition)
}
