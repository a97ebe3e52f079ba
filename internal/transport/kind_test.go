package transport

import (
	"errors"
	"fmt"
	"testing"

	"github.com/neptune-cluster/neptune/internal/nerr"
)

// A handler's error of a kind (bad request, not found) comes back as a
// RemoteError of that kind with the handler's words, and keeps its kind
// through a node that forwards it; an error of no kind has none.
func TestHandlerErrorKindCrossesTheWire(t *testing.T) {
	bad := fmt.Errorf("%w: put wants key=value", nerr.ErrBadRequest)
	for _, tc := range []struct {
		err  error
		kind error
	}{
		{bad, nerr.ErrBadRequest},
		{fmt.Errorf("%w: k", nerr.ErrNotFound), nerr.ErrNotFound},
		{errors.New("disk on fire"), nil},
	} {
		got := FromStatus("n1", ToStatus(tc.err))
		var re *RemoteError
		if !errors.As(got, &re) || re.Message != tc.err.Error() {
			t.Fatalf("%v came back as %#v", tc.err, got)
		}
		forwarded := FromStatus("n2", ToStatus(got))
		for _, e := range []error{got, forwarded} {
			for _, k := range []error{nerr.ErrBadRequest, nerr.ErrNotFound} {
				if errors.Is(e, k) != (k == tc.kind) {
					t.Errorf("%v: errors.Is(%v) = %v, want %v", e, k, !(k == tc.kind), k == tc.kind)
				}
			}
		}
	}
}
