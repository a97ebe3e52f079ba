package wal

import (
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/neptune-cluster/neptune/internal/replica"
)

// TestDedupSurvivesRestart: the table's records, deletions and high-water
// time are stored with the executed marker and come back after a crash;
// entries keep their identity and time.
func TestDedupSurvivesRestart(t *testing.T) {
	fs := vfs.NewStrictMem()
	l, err := open("", fs, Options{}) // the root: a new subdirectory's entry would itself need a sync
	if err != nil {
		t.Fatal(err)
	}
	es := []replica.Entry{{Epoch: 1, LSN: 1, Method: "m", Body: []byte("x"), WriteID: "c1/1", Time: 100},
		{Epoch: 1, LSN: 2, Method: "m", WriteID: "kkey", Time: 200}}
	if err := l.Save(nil, es, true); err != nil {
		t.Fatal(err)
	}
	put := []replica.DedupRecord{{WriteID: "c1/1", LSN: 1, Time: 100, Body: []byte("ok")},
		{WriteID: "kkey", LSN: 2, Time: 200, HasErr: true, Err: "boom"}, {WriteID: "gone", LSN: 0, Time: 50}}
	if err := l.SetAppliedDedup(2, put, nil, 200, false); err != nil {
		t.Fatal(err)
	}
	if err := l.SetAppliedDedup(0, []replica.DedupRecord{{WriteID: "rec", LSN: 3, Time: 250, Recovered: true}}, []string{"gone"}, 250, true); err != nil {
		t.Fatal(err)
	}
	// An unsynced change after the synced one is lost in the crash.
	if err := l.SetAppliedDedup(0, []replica.DedupRecord{{WriteID: "late", LSN: 4, Time: 300}}, nil, 300, false); err != nil {
		t.Fatal(err)
	}
	fs.SetIgnoreSyncs(true) // the crash
	_ = l.Close()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
	l, err = open("", fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs, high, err := l.Dedup()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]replica.DedupRecord{}
	for _, r := range recs {
		got[r.WriteID] = r
	}
	if high != 250 || len(got) != 3 || string(got["c1/1"].Body) != "ok" || got["kkey"].Err != "boom" || !got["kkey"].HasErr ||
		!got["rec"].Recovered || got["rec"].LSN != 3 {
		t.Fatalf("restored high %d, records %+v", high, got)
	}
	rs, err := l.Restore()
	if err != nil {
		t.Fatal(err)
	}
	if rs.Applied != 2 || len(rs.Entries) != 2 || rs.Entries[0].WriteID != "c1/1" || rs.Entries[1].Time != 200 {
		t.Fatalf("restored %+v", rs)
	}
}

// TestUpgradeOldEntryFormat: a log written before entries carried an
// identity is rewritten once and reads back the same.
func TestUpgradeOldEntryFormat(t *testing.T) {
	fs := vfs.NewMem()
	l, err := open("/d", fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Write a version-1 record by hand and drop the format key.
	old := []byte{}
	for _, u := range []uint64{3, 7, 9, 0} {
		old = append(old, byte(u))
	}
	old = append(old, 1, 'm', 1, 'o')
	old = append(old, "body"...)
	if err := l.db.Set(entryKey(7), old, nil); err != nil {
		t.Fatal(err)
	}
	if err := l.db.Delete(formatKey, nil); err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
	l, err = open("/d", fs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	es, err := l.Entries(7, 1)
	if err != nil || len(es) != 1 {
		t.Fatal(es, err)
	}
	if e := es[0]; e.Epoch != 3 || e.LSN != 7 || e.ReqID != 9 || e.Method != "m" || e.Origin != "o" || string(e.Body) != "body" || e.WriteID != "" {
		t.Fatalf("upgraded entry %+v", e)
	}
}
