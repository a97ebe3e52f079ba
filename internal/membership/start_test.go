package membership

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"google.golang.org/protobuf/proto"

	"github.com/neptune-cluster/neptune/internal/transport/pb"
)

// earlyPackets is a transport whose first packets are there before
// memberlist.Create returns, as at a restarted node its peers still
// gossip to.
type earlyPackets struct {
	memberlist.Transport
	ch chan *memberlist.Packet
}

func withEarlyPackets(inner memberlist.Transport, bufs ...[]byte) *earlyPackets {
	e := &earlyPackets{Transport: inner, ch: make(chan *memberlist.Packet, len(bufs))}
	for _, b := range bufs {
		e.ch <- &memberlist.Packet{Buf: b, From: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}, Timestamp: time.Now()}
	}
	go func() {
		for p := range inner.PacketCh() {
			e.ch <- p
		}
	}()
	return e
}

func (e *earlyPackets) PacketCh() <-chan *memberlist.Packet { return e.ch }

// TestAChangeArrivingDuringStartIsRelayed: a spreading announcement that
// arrives while memberlist is still being created is taken and relayed
// once the member is up. The relay queue was made after Create returned,
// and a restarted node process crashed on it (nil queue) under the race
// detector.
func TestAChangeArrivingDuringStartIsRelayed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ann, err := proto.Marshal(&pb.Announcement{NodeId: "x", RpcAddr: "10.0.0.9:7000", Seq: 1, Incarnation: 1,
		Services: []*pb.HostedService{{Name: "svc", Partitions: []int32{0}}}})
	if err != nil {
		t.Fatal(err)
	}
	const userMsg = 8 // memberlist's message type of a delegate's message
	var early [][]byte
	for range 20 {
		early = append(early, append([]byte{userMsg, msgSpread}, ann...))
	}
	a, err := Start(ctx, Config{NodeID: "a", BindAddr: "127.0.0.1",
		Announce:      func() *pb.Announcement { return &pb.Announcement{} },
		testTransport: func(t memberlist.Transport) memberlist.Transport { return withEarlyPackets(t, early...) }})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if !eventually(ctx, 5*time.Second, func() bool { return len(a.Replicas("svc", 0).Replicas) == 1 }) {
		t.Fatal("the announcement that arrived during the start was lost")
	}
	if a.changes.NumQueued() == 0 {
		t.Fatal("the change that arrived during the start is not queued to spread")
	}
}
