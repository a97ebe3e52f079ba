package membership

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"runtime"
	"sync"
	"weak"

	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// Members in one process (a node and its own client, a gateway's client,
// the thousand of `neptune bench scale`) receive the same certificates and
// announcements. Parsing and decoding are pure functions of the bytes, so
// they share the results, held weakly by a hash of the bytes: one copy per
// process rather than one per member, and nothing kept once no member
// holds it. At 128 members in one process, per-member copies were 70% of
// the heap (parsed certificates 35%, decoded announcements 28%, and the
// packets their slices aliased 9%). What is shared is never modified.
// Verifying stays per member: each checks the chain against its own CAs
// and each signature itself.
var (
	sharedCerts         sync.Map // [sha256.Size]byte (of the DER) → weak.Pointer[x509.Certificate]
	sharedAnnouncements sync.Map // [sha256.Size]byte (of the payload) → weak.Pointer[decodedAnn]
)

// parseCertShared parses the certificate der whose fingerprint fp the
// caller checked. The result aliases no caller memory.
func parseCertShared(fp [sha256.Size]byte, der []byte) (*x509.Certificate, error) {
	return loadOrMake(&sharedCerts, fp, func() (*x509.Certificate, error) {
		return x509.ParseCertificate(bytes.Clone(der))
	})
}

// decodedAnn is an announcement's payload and its decoding.
type decodedAnn struct {
	ann     *pb.Announcement
	payload []byte
}

// decodeShared decodes an announcement's payload. The result aliases no
// caller memory; a sealed holds it to keep it shared.
func decodeShared(payload []byte) (*decodedAnn, error) {
	return loadOrMake(&sharedAnnouncements, sha256.Sum256(payload), func() (*decodedAnn, error) {
		d := &decodedAnn{ann: new(pb.Announcement), payload: bytes.Clone(payload)}
		if err := proto.Unmarshal(d.payload, d.ann); err != nil {
			return nil, err
		}
		return d, nil
	})
}

// loadOrMake returns the live value m holds for key, or makes one and
// holds it weakly until it is collected. Two makers racing both succeed;
// the later one is kept.
func loadOrMake[T any](m *sync.Map, key [sha256.Size]byte, make func() (*T, error)) (*T, error) {
	if v, ok := m.Load(key); ok {
		if p := v.(weak.Pointer[T]).Value(); p != nil {
			return p, nil
		}
	}
	p, err := make()
	if err != nil {
		return nil, err
	}
	w := weak.Make(p)
	m.Store(key, w)
	runtime.AddCleanup(p, func(key [sha256.Size]byte) { m.CompareAndDelete(key, w) }, key)
	return p, nil
}
