package membership

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// cuttable is memberlist's transport with a switch that silently drops
// everything in both directions, like a partition.
type cuttable struct {
	memberlist.Transport
	cut     atomic.Bool
	packets chan *memberlist.Packet
	streams chan net.Conn
}

func newCuttable(inner memberlist.Transport) *cuttable {
	c := &cuttable{Transport: inner, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn)}
	go func() {
		for p := range inner.PacketCh() {
			if !c.cut.Load() {
				c.packets <- p
			}
		}
	}()
	go func() {
		for s := range inner.StreamCh() {
			if c.cut.Load() {
				_ = s.Close()
				continue
			}
			c.streams <- s
		}
	}()
	return c
}

func (c *cuttable) PacketCh() <-chan *memberlist.Packet { return c.packets }
func (c *cuttable) StreamCh() <-chan net.Conn           { return c.streams }

func (c *cuttable) WriteTo(b []byte, addr string) (time.Time, error) {
	if c.cut.Load() {
		return time.Now(), nil
	}
	return c.Transport.WriteTo(b, addr)
}

func (c *cuttable) DialTimeout(addr string, d time.Duration) (net.Conn, error) {
	if c.cut.Load() {
		time.Sleep(min(d, 100*time.Millisecond))
		return nil, errors.New("cut")
	}
	return c.Transport.DialTimeout(addr, d)
}

// TestMembersFindEachOtherAfterALongPartition cuts two members apart for
// longer than memberlist gossips to the dead (15 s in its local profile),
// so each declares the other dead and stops contacting it. After the heal
// each must announce itself to the other again within a few seconds:
// without rejoin the yellow pages stay split for good.
func TestMembersFindEachOtherAfterALongPartition(t *testing.T) {
	if testing.Short() {
		t.Skip("cuts the network for 22 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ann := func() *pb.Announcement {
		return &pb.Announcement{Services: []*pb.HostedService{{Name: "svc", Partitions: []int32{0}}}}
	}
	var cutA *cuttable
	a, err := Start(ctx, Config{NodeID: "a", BindAddr: "127.0.0.1", Announce: ann,
		testTransport: func(t memberlist.Transport) memberlist.Transport { cutA = newCuttable(t); return cutA }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Start(ctx, Config{NodeID: "b", BindAddr: "127.0.0.1", Announce: ann, Join: []string{a.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	both := func() bool { return len(a.Replicas("svc", 0).Replicas) == 2 && len(b.Replicas("svc", 0).Replicas) == 2 }
	if !eventually(ctx, 10*time.Second, both) {
		t.Fatal("the members never saw each other")
	}
	cutA.cut.Store(true)
	if !eventually(ctx, 15*time.Second, func() bool { return a.Members() == 1 && b.Members() == 1 }) {
		t.Fatalf("the cut was not noticed: a sees %d members, b %d", a.Members(), b.Members())
	}
	select { // past memberlist's GossipToTheDeadTime
	case <-time.After(17 * time.Second):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	cutA.cut.Store(false)
	healed := time.Now()
	if !eventually(ctx, 8*time.Second, both) {
		t.Fatalf("8 s after the heal the pages are still split: a sees %d replicas, b %d",
			len(a.Replicas("svc", 0).Replicas), len(b.Replicas("svc", 0).Replicas))
	}
	t.Logf("yellow pages whole again %v after the heal", time.Since(healed).Round(time.Millisecond))
}
