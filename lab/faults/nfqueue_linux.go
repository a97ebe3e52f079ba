//go:build linux

package faults

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// nfQueue is a netfilter queue read over raw netlink (nfnetlink_queue):
// the kernel hands each packet an iptables NFQUEUE rule sends here to
// userspace and holds it until it gets a verdict naming the packet's id.
// Verdicts may come in any order, which is how the delayer reorders.
// Only the packets' metadata is copied (NFQNL_COPY_META).
type nfQueue struct {
	fd  int
	num uint16
}

// nfnetlink_queue constants (linux/netfilter/nfnetlink_queue.h).
const (
	nfnlSubsysQueue = 3
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaCfgCmd      = 1
	nfqaCfgParams   = 2
	nfqaCfgQueueMax = 3
	nfqaCfgMask     = 4
	nfqaCfgFlags    = 5
	nfqaPacketHdr   = 1
	nfqaVerdictHdr  = 2

	nfqnlCfgCmdBind = 1
	nfqnlCopyMeta   = 1
	nfqaCfgFailOpen = 1

	nfDrop   = 0
	nfAccept = 1
)

// openNFQueue binds queue num for IPv4, copying metadata only, with room
// for maxLen packets held at once (beyond it the kernel lets packets
// through: fail open).
func openNFQueue(num uint16, maxLen uint32) (*nfQueue, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("nfqueue: socket: %w", err)
	}
	q := &nfQueue{fd: fd, num: num}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		q.Close()
		return nil, fmt.Errorf("nfqueue: bind: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_NO_ENOBUFS, 1)
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)

	cmd := []byte{nfqnlCfgCmdBind, 0, 0, 0}
	binary.BigEndian.PutUint16(cmd[2:], unix.AF_INET)
	params := make([]byte, 5)
	binary.BigEndian.PutUint32(params, 0) // copy range (metadata only)
	params[4] = nfqnlCopyMeta
	be32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	for i, attrs := range [][][]byte{
		{nlAttr(nfqaCfgCmd, cmd)},
		{nlAttr(nfqaCfgParams, params), nlAttr(nfqaCfgQueueMax, be32(maxLen)),
			nlAttr(nfqaCfgMask, be32(nfqaCfgFailOpen)), nlAttr(nfqaCfgFlags, be32(nfqaCfgFailOpen))},
	} {
		msg := q.message(nfqnlMsgConfig, unix.NLM_F_REQUEST|unix.NLM_F_ACK, uint32(i+1), attrs...)
		if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			q.Close()
			return nil, fmt.Errorf("nfqueue: config: %w", err)
		}
		if err := q.ack(); err != nil {
			q.Close()
			return nil, fmt.Errorf("nfqueue: bind queue %d: %w", num, err)
		}
	}
	return q, nil
}

// ack reads the kernel's answer to a request sent with NLM_F_ACK.
func (q *nfQueue) ack() error {
	buf := make([]byte, 8192)
	for range 10 {
		n, _, err := unix.Recvfrom(q.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		for b := buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
			l := int(binary.NativeEndian.Uint32(b))
			typ := binary.NativeEndian.Uint16(b[4:])
			if l < unix.NLMSG_HDRLEN || l > len(b) {
				break
			}
			if typ == unix.NLMSG_ERROR && l >= unix.NLMSG_HDRLEN+4 {
				if e := int32(binary.NativeEndian.Uint32(b[unix.NLMSG_HDRLEN:])); e != 0 {
					return unix.Errno(-e)
				}
				return nil
			}
			b = b[nlAlign(l):]
		}
	}
	return errors.New("no acknowledgement")
}

// message is one nfnetlink_queue message to the kernel.
func (q *nfQueue) message(msgType uint16, flags uint16, seq uint32, attrs ...[]byte) []byte {
	size := unix.NLMSG_HDRLEN + 4
	for _, a := range attrs {
		size += len(a)
	}
	b := make([]byte, unix.NLMSG_HDRLEN, size)
	binary.NativeEndian.PutUint32(b, uint32(size))
	binary.NativeEndian.PutUint16(b[4:], nfnlSubsysQueue<<8|msgType)
	binary.NativeEndian.PutUint16(b[6:], flags)
	binary.NativeEndian.PutUint32(b[8:], seq)
	b = append(b, unix.AF_UNSPEC, 0, 0, 0) // nfgenmsg: family, version, queue (big endian)
	binary.BigEndian.PutUint16(b[unix.NLMSG_HDRLEN+2:], q.num)
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// nlAttr is a netlink attribute, padded to 4 bytes.
func nlAttr(typ uint16, payload []byte) []byte {
	l := 4 + len(payload)
	b := make([]byte, nlAlign(l))
	binary.NativeEndian.PutUint16(b, uint16(l))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[4:], payload)
	return b
}

// verdict releases packet id (accept) or drops it.
func (q *nfQueue) verdict(id uint32, accept bool) error {
	v := make([]byte, 8)
	if accept {
		binary.BigEndian.PutUint32(v, nfAccept)
	} else {
		binary.BigEndian.PutUint32(v, nfDrop)
	}
	binary.BigEndian.PutUint32(v[4:], id)
	msg := q.message(nfqnlMsgVerdict, unix.NLM_F_REQUEST, 0, nlAttr(nfqaVerdictHdr, v))
	return unix.Sendto(q.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK})
}

// read waits (at most the socket's 200 ms receive timeout) for queued
// packets and calls f with each one's id; it returns nil on a timeout.
func (q *nfQueue) read(buf []byte, f func(id uint32)) error {
	n, _, err := unix.Recvfrom(q.fd, buf, 0)
	switch {
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOBUFS):
		return nil
	case err != nil:
		return err
	}
	for b := buf[:n]; len(b) >= unix.NLMSG_HDRLEN; {
		l := int(binary.NativeEndian.Uint32(b))
		typ := binary.NativeEndian.Uint16(b[4:])
		if l < unix.NLMSG_HDRLEN || l > len(b) {
			break
		}
		if typ == nfnlSubsysQueue<<8|nfqnlMsgPacket {
			for a := b[unix.NLMSG_HDRLEN+4 : l]; len(a) >= 4; {
				al := int(binary.NativeEndian.Uint16(a))
				at := binary.NativeEndian.Uint16(a[2:]) & 0x3fff
				if al < 4 || al > len(a) {
					break
				}
				if at == nfqaPacketHdr && al >= 8 {
					f(binary.BigEndian.Uint32(a[4:]))
					break
				}
				a = a[min(nlAlign(al), len(a)):]
			}
		}
		b = b[min(nlAlign(l), len(b)):]
	}
	return nil
}

// Close closes the socket (the kernel unbinds the queue; held packets
// are dropped).
func (q *nfQueue) Close() error { return unix.Close(q.fd) }

func openNFQueueFor(num uint16) (packetQueue, error) { return openNFQueue(num, 8192) }
