package adapter_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/adapter"
)

// Operator declarations are checked field by field, and a service may
// consist of operators alone.
func TestAggregateConfigValidate(t *testing.T) {
	ops := func(local, reduce adapter.OperatorConfig) *adapter.AggregateConfig {
		return &adapter.AggregateConfig{Local: []adapter.OperatorConfig{local}, Reduce: []adapter.OperatorConfig{reduce}}
	}
	good := ops(adapter.OperatorConfig{Name: "count", Route: "/count"}, adapter.OperatorConfig{Name: "sum", Route: "/sum"})
	if err := (adapter.HTTPConfig{BaseURL: "http://127.0.0.1:1", Aggregate: good}).Validate(); err != nil {
		t.Fatalf("operators alone: %v", err)
	}
	for _, tc := range []struct {
		agg  *adapter.AggregateConfig
		want string
	}{
		{&adapter.AggregateConfig{Local: good.Local}, "http.aggregate needs at least one local and one reduce"},
		{ops(adapter.OperatorConfig{Route: "/c"}, good.Reduce[0]), "http.aggregate.local[0].name is required"},
		{ops(good.Local[0], adapter.OperatorConfig{Name: "sum", Route: "sum"}), `http.aggregate.reduce[0].route "sum" must start with /`},
		{ops(good.Local[0], adapter.OperatorConfig{Name: "sum", Route: "/s", Args: []string{"x"}}), "http.aggregate.reduce[0].args is for exec"},
		{&adapter.AggregateConfig{Local: []adapter.OperatorConfig{good.Local[0], good.Local[0]}, Reduce: good.Reduce}, `http.aggregate.local[1].name: operator "count" is listed twice`},
	} {
		err := (adapter.HTTPConfig{BaseURL: "http://127.0.0.1:1", Aggregate: tc.agg}).Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.agg, err, tc.want)
		}
	}
	err := (adapter.ExecConfig{Command: "x", DataDir: "d", Aggregate: good}).Validate()
	if err == nil || !strings.Contains(err.Error(), "exec.aggregate.local[0].route is for http services only") {
		t.Errorf("exec with a route: %v", err)
	}
	if err := (adapter.HTTPConfig{BaseURL: "http://127.0.0.1:1"}).Validate(); err == nil || !strings.Contains(err.Error(), "declare aggregate operators") {
		t.Errorf("neither methods nor operators: %v", err)
	}
}

// An HTTP program's operators: local gets the params and the partition,
// reduce the two partials and the params as frames; a handler that dies
// without answering, or hangs past the operator's deadline, is an error
// of that operator alone.
func TestHTTPOperators(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/local":
			if r.Header.Get(adapter.HeaderOperator) != "local" || r.Header.Get(adapter.HeaderMethod) != "count" {
				http.Error(w, "headers", http.StatusBadRequest)
				return
			}
			switch p := r.Header.Get(adapter.HeaderPartition); p {
			case "3": // crash: the connection drops without an answer
				c, _, _ := w.(http.Hijacker).Hijack()
				c.Close()
			case "5":
				<-r.Context().Done()
			default:
				io.WriteString(w, p+":"+string(body))
			}
		case "/sum":
			a, b, params, err := adapter.ParseReduceBody(body, 1<<20)
			if err != nil || r.Header.Get(adapter.HeaderOperator) != "reduce" || r.Header.Get(adapter.HeaderPartition) != "" {
				http.Error(w, "bad reduce", http.StatusBadRequest)
				return
			}
			w.Write(bytes.Join([][]byte{a, b, params}, []byte("+")))
		}
	}))
	defer srv.Close()
	svc, err := adapter.NewHTTP("agg", adapter.HTTPConfig{BaseURL: srv.URL, Aggregate: &adapter.AggregateConfig{
		Local:  []adapter.OperatorConfig{{Name: "count", Route: "/local"}},
		Reduce: []adapter.OperatorConfig{{Name: "sum", Route: "/sum"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	checkOperators(t, svc)
}

// An executable's operators: the same, with the operator in the
// environment; a process killed by a signal, or hanging until its
// deadline, is an error of that operator alone.
func TestExecOperators(t *testing.T) {
	script := `case "$NEPTUNE_OPERATOR:$NEPTUNE_METHOD:$NEPTUNE_PARTITION" in
local:count:3) kill -9 $$ ;;
local:count:5) sleep 30 ;;
local:count:*) printf '%s:' "$NEPTUNE_PARTITION"; cat ;;
reduce:sum:) tr -d '\n' ;;
*) echo "unexpected $NEPTUNE_OPERATOR:$NEPTUNE_METHOD:$NEPTUNE_PARTITION" >&2; exit 3 ;;
esac`
	svc, err := adapter.NewExec("agg", adapter.ExecConfig{Command: "sh", Args: []string{"-c", "exit 9"}, DataDir: t.TempDir(), Aggregate: &adapter.AggregateConfig{
		Local:  []adapter.OperatorConfig{{Name: "count", Args: []string{"-c", script}}},
		Reduce: []adapter.OperatorConfig{{Name: "sum", Args: []string{"-c", script}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	checkOperators(t, svc)
}

func checkOperators(t *testing.T, svc neptune.Service) {
	t.Helper()
	ctx := context.Background()
	local, reduce := svc.Aggregate.Local["count"], svc.Aggregate.Reduce["sum"]
	out, err := local(ctx, 2, []byte("x"))
	if err != nil || string(out) != "2:x" {
		t.Fatalf("local: %q, %v", out, err)
	}
	out, err = reduce(ctx, []byte("a"), []byte{0xff}, []byte("p"))
	if err != nil {
		t.Fatalf("reduce: %v", err)
	}
	// The HTTP program parses the frames; the script echoes them.
	frames := strings.ReplaceAll(string(adapter.ReduceBody([]byte("a"), []byte{0xff}, []byte("p"))), "\n", "")
	if got := string(out); got != "a+\xff+p" && got != frames {
		t.Fatalf("reduce got %q", got)
	}
	if _, err := local(ctx, 3, nil); err == nil {
		t.Fatal("crashed operator: no error")
	}
	ctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := local(ctx, 5, nil); !errors.Is(err, neptune.ErrDeadline) {
		t.Fatalf("hung operator: %v, want ErrDeadline", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("hung operator held its caller %v", took)
	}
}

// FuzzParseReduceBody: any body either parses into three parts that
// ReduceBody turns back into an equivalent body, or is refused.
func FuzzParseReduceBody(f *testing.F) {
	f.Add(adapter.ReduceBody([]byte("a"), []byte{0xff}, nil))
	f.Add([]byte("{\"data\":\"1\"}\n{\"data\":\"2\"}\n"))
	f.Add([]byte(strconv.Quote("x")))
	f.Fuzz(func(t *testing.T, body []byte) {
		a, b, p, err := adapter.ParseReduceBody(body, 1<<16)
		if err != nil {
			return
		}
		a2, b2, p2, err := adapter.ParseReduceBody(adapter.ReduceBody(a, b, p), 1<<20)
		if err != nil || !bytes.Equal(a, a2) || !bytes.Equal(b, b2) || !bytes.Equal(p, p2) {
			t.Fatalf("round trip of %q: %q %q %q, %v", body, a2, b2, p2, err)
		}
	})
}
