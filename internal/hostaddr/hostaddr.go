// Package hostaddr decides where a member listens and what address it
// tells others to dial, which differ in containers: a node bound to
// 0.0.0.0 or :: must never announce that, and one named by a host name
// (a Compose service, a Kubernetes pod) should announce the name, which
// still resolves after it restarts on a new IP.
package hostaddr

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Unspecified reports whether host binds every interface ("", 0.0.0.0, ::).
func Unspecified(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// Loopback reports whether host is a loopback address or "localhost".
func Loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// resolveWait bounds one name lookup.
const resolveWait = 5 * time.Second

// IP resolves host (an address or a name) to one IP, IPv4 first.
func IP(host string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveWait)
	defer cancel()
	ips, err := net.DefaultResolver.LookupIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if ip.To4() != nil {
			return ip, nil
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("%q resolves to no address", host)
	}
	return ips[0], nil
}

// BindIP is the IP to bind for host: an unspecified host stays as it is
// (every interface), a name is resolved.
func BindIP(host string) (string, error) {
	if host == "" {
		return "0.0.0.0", nil
	}
	if Unspecified(host) {
		return host, nil
	}
	ip, err := IP(host)
	if err != nil {
		return "", err
	}
	return ip.String(), nil
}

// ErrUnroutable is an advertised address no other host can dial.
var ErrUnroutable = errors.New("is not an address another host can dial")

// Advertise is the host a member bound to bind tells others to dial:
// advertise if given (a name is kept, so it resolves afresh after a
// restart), else bind if it names one address, else the local address on
// the route to the first seed that resolves, else the first non-loopback
// address of an interface that is up. An unspecified, multicast or
// unresolvable advertise address is refused.
func Advertise(bind, advertise string, seeds []string) (string, error) {
	if advertise != "" {
		ip, err := IP(advertise)
		if err != nil {
			return "", fmt.Errorf("%q does not resolve: %w", advertise, err)
		}
		if ip.IsUnspecified() || ip.IsMulticast() {
			return "", fmt.Errorf("%q %w", advertise, ErrUnroutable)
		}
		return advertise, nil
	}
	if !Unspecified(bind) {
		return bind, nil
	}
	for _, s := range seeds {
		if ip := routeTo(s); ip != nil {
			return ip.String(), nil
		}
	}
	if ip := firstInterfaceIP(); ip != nil {
		return ip.String(), nil
	}
	return "", fmt.Errorf("bound to %q and no interface has an address to advertise: name one", bind)
}

// routeTo is the local address the kernel would send from to reach seed
// (a UDP "connection" sends nothing), or nil.
func routeTo(seed string) net.IP {
	host, port, err := net.SplitHostPort(seed)
	if err != nil {
		return nil
	}
	ip, err := IP(host)
	if err != nil || ip.IsUnspecified() {
		return nil
	}
	c, err := net.Dial("udp", net.JoinHostPort(ip.String(), port))
	if err != nil {
		return nil
	}
	defer c.Close()
	local, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || local.IP.IsUnspecified() {
		return nil
	}
	return local.IP
}

// firstInterfaceIP is the first IPv4 (else IPv6) non-loopback,
// non-link-local address of an interface that is up, or nil.
func firstInterfaceIP() net.IP {
	ifaces, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var v6 net.IP
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
				continue
			}
			if n.IP.To4() != nil {
				return n.IP
			}
			if v6 == nil {
				v6 = n.IP
			}
		}
	}
	return v6
}

// Join is host:port for an advertised host and a bound listener's
// address ("[::]:7001").
func Join(host, bound string) string {
	_, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound
	}
	return net.JoinHostPort(host, port)
}
