package hostaddr

import (
	"errors"
	"net"
	"testing"
)

func TestAdvertise(t *testing.T) {
	for _, tc := range []struct {
		bind, advertise string
		seeds           []string
		want            string
		err             error
	}{
		{"127.0.0.1", "", nil, "127.0.0.1", nil},
		{"10.1.2.3", "", nil, "10.1.2.3", nil},
		{"0.0.0.0", "node1.example", nil, "", nil}, // does not resolve: an error
		{"0.0.0.0", "localhost", nil, "localhost", nil},
		{"0.0.0.0", "0.0.0.0", nil, "", ErrUnroutable},
		{"::", "::", nil, "", ErrUnroutable},
		{"0.0.0.0", "224.0.0.1", nil, "", ErrUnroutable},
		// Bound everywhere: the address on the route to the seed.
		{"0.0.0.0", "", []string{"127.0.0.1:7946"}, "127.0.0.1", nil},
		{"::", "", []string{"nonsense", "127.0.0.1:7946"}, "127.0.0.1", nil},
	} {
		got, err := Advertise(tc.bind, tc.advertise, tc.seeds)
		switch {
		case tc.advertise == "node1.example":
			if err == nil {
				t.Errorf("%+v: an unresolvable name was accepted", tc)
			}
		case tc.err != nil:
			if !errors.Is(err, tc.err) {
				t.Errorf("%+v: %q %v, want %v", tc, got, err, tc.err)
			}
		case err != nil || got != tc.want:
			t.Errorf("%+v: %q %v, want %q", tc, got, err, tc.want)
		}
	}
	// Bound everywhere, no seed: some interface's address, never 0.0.0.0.
	if got, err := Advertise("0.0.0.0", "", nil); err == nil && Unspecified(got) {
		t.Errorf("advertised %q", got)
	}
}

func TestBindIPAndJoin(t *testing.T) {
	if ip, err := BindIP("localhost"); err != nil || !net.ParseIP(ip).IsLoopback() {
		t.Fatalf("localhost binds %q %v", ip, err)
	}
	if ip, _ := BindIP("::"); ip != "::" {
		t.Fatalf(":: binds %q", ip)
	}
	if got := Join("n1", "[::]:7001"); got != "n1:7001" {
		t.Fatalf("Join = %q", got)
	}
}
