package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/echo"
)

// neptune call --stream sends each stdin line as one message of a
// bidirectional stream and prints each answer on a line, in order, and
// exits once the stream ends after stdin's end.
func TestCallStreamSendsLinesAndPrintsAnswers(t *testing.T) {
	nd, err := neptune.NewNode(neptune.NodeConfig{Security: neptune.Security{Insecure: true}, ID: "n0", AnnounceInterval: 100 * time.Millisecond})
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
	for _, tc := range []struct {
		args    []string
		in      string
		want    string
		errHave string
	}{
		{args: []string{"--method", "talk"}, in: "one\ntwo\n\nfour", want: "one\ntwo\n\nfour\n"},
		{args: []string{"--method", "talk"}, in: "", want: ""},
		{args: []string{"--method", "echo"}, in: "x\n", errHave: "not a stream method"},
		{args: []string{"--method", "talk", "--body", "b"}, in: "x\n", errHave: "--body with --stream"},
	} {
		cmd := newCallCmd()
		var out bytes.Buffer
		cmd.SetIn(strings.NewReader(tc.in))
		cmd.SetOut(&out)
		cmd.SetErr(&bytes.Buffer{})
		cmd.SetArgs(append([]string{"--join", nd.GossipAddr(), "--insecure", "--service", "echo", "--stream", "--timeout", "10s"}, tc.args...))
		err := cmd.ExecuteContext(context.Background())
		switch {
		case tc.errHave != "":
			if err == nil || !strings.Contains(err.Error(), tc.errHave) {
				t.Errorf("%v: error %v, want one saying %q", tc.args, err, tc.errHave)
			}
		case err != nil:
			t.Errorf("%v: %v", tc.args, err)
		case out.String() != tc.want:
			t.Errorf("%v with stdin %q printed %q, want %q", tc.args, tc.in, out.String(), tc.want)
		}
	}
}
