package nerr

import "testing"

// WriteID's string form is stored (write log entries, dedup tables,
// snapshots), so it must stay what replicas already wrote: "k"+key, or
// "c"+client id+"/"+seq, a key winning over a client id.
func TestWriteIDStringIsTheStoredForm(t *testing.T) {
	for _, c := range []struct {
		w    WriteID
		want string
		zero bool
	}{
		{WriteID{}, "", true},
		{WriteID{Key: "order-7"}, "korder-7", false},
		{WriteID{ClientID: "ab12", Seq: 42}, "cab12/42", false},
		{WriteID{ClientID: "ab12~s3", Seq: 1}, "cab12~s3/1", false},
		{WriteID{Key: "k", ClientID: "ab12", Seq: 42}, "kk", false},
	} {
		if got := c.w.String(); got != c.want || c.w.IsZero() != c.zero {
			t.Errorf("%+v: String %q IsZero %v, want %q %v", c.w, got, c.w.IsZero(), c.want, c.zero)
		}
	}
}
