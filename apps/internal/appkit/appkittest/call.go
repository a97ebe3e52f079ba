package appkittest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/neptune-cluster/neptune"
)

// Call runs one method of svc in-process, as a node would. A string body
// is sent as is; anything else is marshalled to JSON.
func Call(t *testing.T, svc neptune.Service, method string, part int, lsn uint64, body any) ([]byte, error) {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range svc.Methods {
		if m.Name == method {
			resp, err := m.Handler(context.Background(), &neptune.Request{Service: svc.Name, Partition: part, Method: method, Mode: m.Mode, Body: b, LSN: lsn})
			if err != nil {
				return nil, err
			}
			return resp.Body, nil
		}
	}
	t.Fatalf("service %s has no method %s", svc.Name, method)
	return nil, nil
}

// MustCall is Call that fails the test on an error and decodes the answer.
func MustCall[T any](t *testing.T, svc neptune.Service, method string, part int, lsn uint64, body any) T {
	t.Helper()
	b, err := Call(t, svc, method, part, lsn, body)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	var out T
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s answered %q: %v", method, b, err)
	}
	return out
}
