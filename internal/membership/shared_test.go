package membership

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune/internal/clock"
)

// TestMembersInOneProcessShareWhatTheyOpen: two members opening the same
// signed announcement hold one decoded announcement and one parsed
// certificate between them, and what they keep aliases none of the
// packet, which the transport may reuse (and which, aliased, would keep a
// whole push/pull state alive per entry).
func TestMembersInOneProcessShareWhatTheyOpen(t *testing.T) {
	clk := clock.NewManual(time.Now())
	m := newMaterial(t, "c", clk)
	n1, n2, n3 := m.auth(nodeID("n1"), "c"), m.auth(nodeID("n2"), "c"), m.auth(nodeID("n3"), "c")
	_, env, err := n1.seal(announcement("n1", 1), 1)
	if err != nil {
		t.Fatal(err)
	}
	packet := func() []byte { return append([]byte(nil), env...) }
	b2, b3 := packet(), packet()
	a2, s2, err := n2.open(b2)
	if err != nil {
		t.Fatal(err)
	}
	a3, s3, err := n3.open(b3)
	if err != nil {
		t.Fatal(err)
	}
	if a2 != a3 || &s2.payload[0] != &s3.payload[0] {
		t.Errorf("two members hold two decodings of one announcement")
	}
	fp := sha256.Sum256(n1.src.Certificate().Leaf.Raw)
	if n2.known[fp] == nil || n2.known[fp] != n3.known[fp] {
		t.Errorf("two members hold two parsings of one certificate")
	}
	clear(b2)
	clear(b3)
	if a2.NodeId != "n1" || n2.certificate(fp) == nil || sha256.Sum256(n2.certificate(fp)) != fp {
		t.Fatalf("what was opened changed with the packet: %v", a2)
	}
	if _, _, err := n3.open(s2.encode(n2.certificate(fp))); err != nil {
		t.Fatalf("the kept signed form no longer verifies once the packet is reused: %v", err)
	}
}
