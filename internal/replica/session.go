package replica

// Session is a client's version vector for level 3's progressive version
// delivery (the paper's NeptuneHandle): it records, per partition, the
// highest version any call returned. Reading only from replicas at or above
// it gives read-your-writes and monotonic reads. Not safe for concurrent use.
type Session struct {
	seen map[string]LSN
}

// Observe records the version a call on partition returned (for a write,
// the write's LSN; for a read, the version that served it).
func (s *Session) Observe(partition string, v LSN) {
	if s.seen == nil {
		s.seen = map[string]LSN{}
	}
	s.seen[partition] = max(s.seen[partition], v)
}

// Min is the lowest version that may serve this session's next read.
func (s *Session) Min(partition string) LSN { return s.seen[partition] }

// MayServe reports whether a replica at version v may serve a level-3 read
// with the session's floor sessionMin, given the primary's published
// version of x seconds ago (Status.VersionAgo). When no replica qualifies,
// the read goes to the primary, which is always fresh enough.
func MayServe(v, versionAgo, sessionMin LSN) bool {
	return v >= versionAgo && v >= sessionMin
}
