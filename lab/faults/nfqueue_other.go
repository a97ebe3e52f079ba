//go:build !linux

package faults

import "errors"

func openNFQueueFor(uint16) (packetQueue, error) {
	return nil, errors.New("delayer: netfilter queues need Linux")
}
