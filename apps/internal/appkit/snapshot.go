package appkit

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// Table is one table of a service's schema as snapshots see it: every
// table has a part column, which selects a partition's rows; Columns are
// the others, and Key the columns of its primary key after part (the
// order rows are dumped in).
type Table struct {
	Name    string
	Columns []string
	Key     []string
}

// Snapshots is the neptune.Snapshotter of a service stored in a DB: a
// partition's image is its rows in Tables and its LSN. It works the same
// on SQLite and PostgreSQL, and on one partition at a time (the services
// keep every partition in the same tables, so copying the database file
// would carry the others along).
type Snapshots struct {
	DB     *DB
	Tables []Table
}

// ErrSnapshot is returned for an image Restore cannot use (cut off,
// corrupt, or from another schema).
var ErrSnapshot = errors.New("appkit: bad snapshot")

// The image: a header naming the format and the tables, the LSN, each
// table's rows (a row marker, then its values, each a type tag and its
// bytes; an end marker), and a trailer with the row count, so a cut-off
// stream is refused rather than restored in part.
const (
	snapMagic = "neptune-appkit-snapshot/1"
	snapEnd   = "end"

	valNull   = 0
	valInt    = 1
	valString = 2
	valBytes  = 3
	valFloat  = 4
	valBool   = 5

	markRow = 1
	markEnd = 0
)

// header names the format and the tables with their columns, so an image
// taken under another schema is refused.
func (s *Snapshots) header() string {
	var b strings.Builder
	b.WriteString(snapMagic)
	for _, t := range s.Tables {
		fmt.Fprintf(&b, ";%s(%s)", t.Name, strings.Join(t.Columns, ","))
	}
	return b.String()
}

// Snapshot implements neptune.Snapshotter. It reads the partition in one
// read-only transaction (REPEATABLE READ on PostgreSQL; on SQLite a
// deferred read transaction, which in WAL mode sees one commit point and
// does not block the writer), so the image is the state after one write
// and its LSN is the one that write recorded (DB.Write commits the two
// together). Writes go on while it streams.
func (s *Snapshots) Snapshot(ctx context.Context, partition int, w io.Writer) (uint64, error) {
	opts := &sql.TxOptions{ReadOnly: true}
	if s.DB.Driver == "pgx" {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := s.DB.BeginTx(ctx, opts)
	if err != nil {
		return 0, fmt.Errorf("appkit: snapshot: %w", err)
	}
	defer tx.Rollback()
	var lsn int64
	err = tx.QueryRowContext(ctx, fmt.Sprintf(`SELECT lsn FROM %s WHERE part = $1`, s.DB.lsnTable), partition).Scan(&lsn)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("appkit: snapshot: read LSN: %w", err)
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := encoder{w: bw}
	enc.str(s.header())
	enc.uvarint(uint64(lsn))
	var n uint64
	for _, t := range s.Tables {
		q := fmt.Sprintf(`SELECT %s FROM %s WHERE part = $1 ORDER BY %s`, strings.Join(t.Columns, ", "), t.Name, strings.Join(t.Key, ", "))
		c, err := dumpRows(ctx, tx, q, partition, len(t.Columns), &enc)
		if err != nil {
			return 0, fmt.Errorf("appkit: snapshot %s: %w", t.Name, err)
		}
		n += c
		enc.byte(markEnd)
	}
	enc.uvarint(n)
	enc.str(snapEnd)
	if enc.err == nil {
		enc.err = bw.Flush()
	}
	if enc.err != nil {
		return 0, fmt.Errorf("appkit: snapshot: %w", enc.err)
	}
	return uint64(lsn), nil
}

func dumpRows(ctx context.Context, tx *sql.Tx, q string, partition, ncol int, enc *encoder) (uint64, error) {
	rows, err := tx.QueryContext(ctx, q, partition)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	vals := make([]any, ncol)
	ptrs := make([]any, ncol)
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var n uint64
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		enc.byte(markRow)
		for _, v := range vals {
			enc.value(v)
		}
		if enc.err != nil {
			return n, enc.err
		}
		n++
	}
	return n, rows.Err()
}

// Restore implements neptune.Snapshotter: in one write transaction it
// deletes the partition's rows, inserts the image's and sets its LSN, so
// a cut-off or corrupt image (checked to its trailer before the commit)
// changes nothing. The commit is durable (SQLite synchronous=FULL,
// PostgreSQL's default).
func (s *Snapshots) Restore(ctx context.Context, partition int, r io.Reader) (uint64, error) {
	dec := decoder{r: bufio.NewReaderSize(r, 64<<10)}
	if h := dec.str(); dec.err == nil && h != s.header() {
		return 0, fmt.Errorf("%w: header %.200q, want %q", ErrSnapshot, h, s.header())
	}
	lsn := dec.uvarint()
	if dec.err != nil {
		return 0, fmt.Errorf("%w: %w", ErrSnapshot, dec.err)
	}
	if lsn > math.MaxInt64 {
		return 0, fmt.Errorf("%w: %d", ErrLSN, lsn)
	}
	if s.DB.Driver == "sqlite" {
		s.DB.sqliteWrite.Lock()
		defer s.DB.sqliteWrite.Unlock()
	}
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("appkit: restore: %w", err)
	}
	defer tx.Rollback()
	var n uint64
	for _, t := range s.Tables {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DELETE FROM %s WHERE part = $1`, t.Name), partition); err != nil {
			return 0, fmt.Errorf("appkit: restore %s: %w", t.Name, err)
		}
		c, err := loadRows(ctx, tx, t, partition, &dec)
		if err != nil {
			return 0, fmt.Errorf("appkit: restore %s: %w", t.Name, err)
		}
		n += c
	}
	if got, end := dec.uvarint(), dec.str(); dec.err != nil || got != n || end != snapEnd {
		return 0, fmt.Errorf("%w: trailer says %d rows, read %d (%v)", ErrSnapshot, got, n, dec.err)
	}
	q := fmt.Sprintf(`INSERT INTO %[1]s (part, lsn) VALUES ($1, $2) ON CONFLICT (part) DO UPDATE SET lsn = excluded.lsn`, s.DB.lsnTable)
	if _, err := tx.ExecContext(ctx, q, partition, int64(lsn)); err != nil {
		return 0, fmt.Errorf("appkit: restore LSN: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("appkit: restore: %w", err)
	}
	return lsn, nil
}

func loadRows(ctx context.Context, tx *sql.Tx, t Table, partition int, dec *decoder) (uint64, error) {
	ph := make([]string, len(t.Columns)+1)
	for i := range ph {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	st, err := tx.PrepareContext(ctx, fmt.Sprintf(`INSERT INTO %s (part, %s) VALUES (%s)`, t.Name, strings.Join(t.Columns, ", "), strings.Join(ph, ", ")))
	if err != nil {
		return 0, err
	}
	defer st.Close()
	args := make([]any, len(t.Columns)+1)
	args[0] = partition
	var n uint64
	for {
		switch m := dec.byte(); {
		case dec.err != nil:
			return n, fmt.Errorf("%w: %w", ErrSnapshot, dec.err)
		case m == markEnd:
			return n, nil
		case m != markRow:
			return n, fmt.Errorf("%w: row marker %d", ErrSnapshot, m)
		}
		for i := range t.Columns {
			args[i+1] = dec.value()
		}
		if dec.err != nil {
			return n, fmt.Errorf("%w: %w", ErrSnapshot, dec.err)
		}
		if _, err := st.ExecContext(ctx, args...); err != nil {
			return n, err
		}
		n++
	}
}

// encoder writes the image's primitives; the first error sticks.
type encoder struct {
	w   *bufio.Writer
	err error
	buf []byte
}

func (e *encoder) flush() {
	if e.err == nil {
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

func (e *encoder) byte(b byte)      { e.buf = append(e.buf, b); e.flush() }
func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v); e.flush() }
func (e *encoder) str(s string) {
	e.buf = binary.AppendUvarint(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
	e.flush()
}

// value writes one column value of the types database/sql drivers return.
func (e *encoder) value(v any) {
	switch v := v.(type) {
	case nil:
		e.buf = append(e.buf, valNull)
	case int64:
		e.buf = binary.AppendVarint(append(e.buf, valInt), v)
	case string:
		e.buf = append(binary.AppendUvarint(append(e.buf, valString), uint64(len(v))), v...)
	case []byte:
		e.buf = append(binary.AppendUvarint(append(e.buf, valBytes), uint64(len(v))), v...)
	case float64:
		e.buf = binary.BigEndian.AppendUint64(append(e.buf, valFloat), math.Float64bits(v))
	case bool:
		b := byte(0)
		if v {
			b = 1
		}
		e.buf = append(e.buf, valBool, b)
	default:
		if e.err == nil {
			e.err = fmt.Errorf("column value of type %T", v)
		}
	}
	e.flush()
}

// decoder reads what encoder wrote; the first error sticks.
type decoder struct {
	r   *bufio.Reader
	err error
}

// maxLen bounds one string or byte value, so a corrupt length cannot
// allocate without limit.
const maxLen = 1 << 30

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	b, err := d.r.ReadByte()
	d.fail(err)
	return b
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	d.fail(err)
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > maxLen {
		d.err = fmt.Errorf("value of %d bytes", n)
		return nil
	}
	b := make([]byte, n)
	_, err := io.ReadFull(d.r, b)
	d.fail(err)
	return b
}

func (d *decoder) str() string { return string(d.bytes()) }

func (d *decoder) value() any {
	switch t := d.byte(); {
	case d.err != nil:
		return nil
	case t == valNull:
		return nil
	case t == valInt:
		v, err := binary.ReadVarint(d.r)
		d.fail(err)
		return v
	case t == valString:
		return d.str()
	case t == valBytes:
		return d.bytes()
	case t == valFloat:
		var b [8]byte
		_, err := io.ReadFull(d.r, b[:])
		d.fail(err)
		return math.Float64frombits(binary.BigEndian.Uint64(b[:]))
	case t == valBool:
		return d.byte() == 1
	default:
		d.err = fmt.Errorf("value type %d", t)
		return nil
	}
}

// fail records err, an EOF inside the image as a cut-off one.
func (d *decoder) fail(err error) {
	if err != nil && d.err == nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		d.err = err
	}
}
