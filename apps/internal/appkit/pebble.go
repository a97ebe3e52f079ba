package appkit

import (
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/cockroachdb/pebble"

	"github.com/neptune-cluster/neptune"
)

// Pebble is a service's pebble store that survives its storage failing
// (a full disk, an I/O error): pebble reports such a failure through its
// logger's Fatalf, whose default exits the process, and then returns as
// if the commit succeeded. Here Fatalf records the failure, Commit
// reports it wrapping neptune.ErrStorage (the write did not take effect:
// a replicated partition runs it again later), and DB reopens the store
// from disk before it is used again. Callers serialise writes (as the
// services do, under their own lock).
type Pebble struct {
	dir string
	log *pebbleLog
	db  *pebble.DB
}

// OpenPebble opens (creating if needed) the store in dir.
func OpenPebble(dir string) (*Pebble, error) {
	p := &Pebble{dir: dir, log: &pebbleLog{}}
	db, err := pebble.Open(dir, p.options())
	if err == nil {
		err = p.log.failed()
	}
	if err != nil {
		if db != nil {
			_ = db.Close()
		}
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	p.db = db
	return p, nil
}

func (p *Pebble) options() *pebble.Options { return &pebble.Options{Logger: p.log} }

// DB is the store's database, opened again first if it failed. The error
// wraps neptune.ErrStorage.
func (p *Pebble) DB() (*pebble.DB, error) {
	cause := p.log.failed()
	if cause == nil {
		return p.db, nil
	}
	if p.db != nil {
		_ = p.db.Close() // (reports the failure again)
		p.db = nil
	}
	p.log.reset()
	db, err := pebble.Open(p.dir, p.options())
	if err == nil {
		err = p.log.failed()
	}
	if err != nil {
		if db != nil {
			_ = db.Close()
		}
		p.log.fail(err)
		return nil, fmt.Errorf("%w: reopen %s after %w: %w", neptune.ErrStorage, p.dir, cause, err)
	}
	p.db = db
	return db, nil
}

// Commit commits b, synced. An error wraps neptune.ErrStorage: b did not
// take effect (a failed sync may still have written it, which a store
// that commits a write's LSN with it finds as applied).
func (p *Pebble) Commit(b *pebble.Batch) error {
	if err := p.log.failed(); err != nil {
		return fmt.Errorf("%w: %w", neptune.ErrStorage, err)
	}
	err := b.Commit(pebble.Sync)
	if ferr := p.log.failed(); ferr != nil {
		err = ferr
	} else if err != nil {
		p.log.fail(err) // reopen before the next use
	}
	if err != nil {
		return fmt.Errorf("%w: %w", neptune.ErrStorage, err)
	}
	return nil
}

// Close closes the store.
func (p *Pebble) Close() error {
	if p.db == nil {
		return nil
	}
	return p.db.Close()
}

// pebbleLog is the store's pebble logger: Infof dropped, Errorf to the
// standard logger (as pebble's own), Fatalf recorded.
type pebbleLog struct {
	mu  sync.Mutex
	err error
}

func (l *pebbleLog) Infof(string, ...any) {}

func (l *pebbleLog) Errorf(format string, args ...any) { log.Printf(format, args...) }

func (l *pebbleLog) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	log.Print(msg)
	var cause error
	for _, a := range args {
		if e, ok := a.(error); ok {
			cause = e
			break
		}
	}
	if cause == nil {
		cause = errors.New(msg)
	}
	l.fail(cause)
}

func (l *pebbleLog) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

func (l *pebbleLog) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *pebbleLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.err = nil
}
