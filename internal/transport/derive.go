package transport

import (
	"crypto/hkdf"
	"crypto/sha256"
	"sync"
)

// DerivedKeys are keys for one purpose (poll HMACs, gateway demand
// gossip, …) derived with HKDF-SHA-256 from the cluster keys, so that a
// key leaked from one use opens no other. The cluster keyring rotates
// while nodes run, so it is read on every use; derivations are cached.
// It is safe for concurrent use.
type DerivedKeys struct {
	cluster func() [][]byte
	info    string

	mu      sync.Mutex
	derived map[string][]byte // cluster key → derived key
}

// NewDerivedKeys derives from cluster's keys with info (a purpose label,
// typically followed by the cluster name).
func NewDerivedKeys(cluster func() [][]byte, info string) *DerivedKeys {
	return &DerivedKeys{cluster: cluster, info: info, derived: map[string][]byte{}}
}

// Keys returns the derived keys, the primary's first.
func (d *DerivedKeys) Keys() [][]byte {
	cluster := d.cluster()
	out := make([][]byte, 0, len(cluster))
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, k := range cluster {
		dk, ok := d.derived[string(k)]
		if !ok {
			var err error
			if dk, err = hkdf.Key(sha256.New, k, nil, d.info, sha256.Size); err != nil {
				continue // only for absurd key lengths: the key is skipped
			}
			if len(d.derived) > 64 { // rotated many times: start over
				clear(d.derived)
			}
			d.derived[string(k)] = dk
		}
		out = append(out, dk)
	}
	return out
}
