package clustertest

import (
	"context"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/echo"
)

// A node's zone (NodeConfig.Zone) reaches every member's yellow pages,
// where placement reads it.
func TestZoneIsAnnounced(t *testing.T) {
	nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: "z", Zone: "rack-7",
		AnnounceInterval: 100 * time.Millisecond, AnnounceTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := nd.Register(echo.Service(), 0); err != nil {
		t.Fatal(err)
	}
	if err := nd.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer nd.Close()
	c := nd.Client()
	waitFor(t, 5*time.Second, func() bool {
		ms := c.Members(context.Background(), 0)
		return len(ms) == 1 && ms[0].Zone == "rack-7"
	})
}
