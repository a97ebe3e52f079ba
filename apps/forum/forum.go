// Package forum is the dissertation's discussion-group service: messages
// in topics, threaded by reply-to, partitioned by topic, stored in SQLite
// (embedded default) or PostgreSQL.
//
// Every method takes and returns JSON (types below). A client picks the
// partition of a topic with Partition(topic, n). Message ids are numbered
// per partition inside the write's transaction, so replicas that apply the
// same writes in LSN order assign the same ids.
package forum

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/internal/appkit"
)

// Errors a call can return (wrapped, with the offending value).
var (
	ErrBadRequest     = errors.New("forum: malformed request")
	ErrUnknownTopic   = errors.New("forum: unknown topic")
	ErrUnknownMessage = errors.New("forum: unknown message")
)

// AddMsgRequest is the body of AddMsg (write). ReplyTo 0 starts a thread;
// otherwise it must name a message of the same topic in this partition.
type AddMsgRequest struct {
	Topic   string `json:"topic"`
	ReplyTo int64  `json:"reply_to,omitempty"`
	Author  string `json:"author"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

// AddMsgResponse answers AddMsg. Replayed is true when the request's LSN
// had already been applied: nothing was written again and ID is 0.
type AddMsgResponse struct {
	ID       int64 `json:"id"`
	Replayed bool  `json:"replayed,omitempty"`
}

// ViewHeadersRequest is the body of ViewHeaders (read).
type ViewHeadersRequest struct {
	Topic string `json:"topic"`
}

// Header is one message in a thread tree, without its body.
type Header struct {
	ID      int64    `json:"id"`
	Author  string   `json:"author"`
	Subject string   `json:"subject"`
	Replies []Header `json:"replies,omitempty"`
}

// ViewHeadersResponse lists a topic's threads, oldest first, each with its
// replies nested under the message they answer.
type ViewHeadersResponse struct {
	Topic   string   `json:"topic"`
	Threads []Header `json:"threads"`
}

// ViewMsgRequest is the body of ViewMsg (read).
type ViewMsgRequest struct {
	ID int64 `json:"id"`
}

// Message is ViewMsg's answer.
type Message struct {
	ID      int64  `json:"id"`
	Topic   string `json:"topic"`
	ReplyTo int64  `json:"reply_to,omitempty"`
	Author  string `json:"author"`
	Subject string `json:"subject"`
	Body    string `json:"body"`
}

// DigestRequest is the body of Digest (read): {} or empty.
type DigestRequest struct{}

// DigestResponse summarizes one replica's copy of a partition, so replicas
// can be compared without shipping their messages: the number of
// messages, the last applied LSN and a SHA-256 over every message in id
// order. Two replicas that applied the same writes answer the same.
type DigestResponse struct {
	Messages int    `json:"messages"`
	LSN      uint64 `json:"lsn"`
	SHA256   string `json:"sha256"`
}

var schema = []string{
	`CREATE TABLE IF NOT EXISTS forum_msg (
		part INTEGER NOT NULL, id BIGINT NOT NULL, topic TEXT NOT NULL, reply_to BIGINT NOT NULL,
		author TEXT NOT NULL, subject TEXT NOT NULL, body TEXT NOT NULL,
		PRIMARY KEY (part, id))`,
	`CREATE INDEX IF NOT EXISTS forum_msg_topic ON forum_msg (part, topic, id)`,
}

// tables is the schema as snapshots see it.
var tables = []appkit.Table{
	{Name: "forum_msg", Columns: []string{"id", "topic", "reply_to", "author", "subject", "body"}, Key: []string{"id"}},
}

// Forum is one node's forum store. Safe for concurrent use.
type Forum struct{ db *appkit.DB }

// Open opens (creating if needed) the forum's tables in the database named
// by dsn: a postgres:// URL, an SQLite file path, or "" for a private
// in-memory SQLite database. Each node must have its own database.
func Open(ctx context.Context, dsn string) (*Forum, error) {
	db, err := appkit.Open(ctx, dsn, "forum_lsn", schema)
	if err != nil {
		return nil, fmt.Errorf("forum: %w", err)
	}
	return &Forum{db: db}, nil
}

// Close closes the database.
func (f *Forum) Close() error { return f.db.Close() }

// Partition is the partition of topic among n.
func Partition(topic string, n int) int { return appkit.Partition(topic, n) }

// Service returns the forum service: AddMsg (write), ViewHeaders, ViewMsg
// and Digest (read), the CHECK callback, and snapshots of a partition's
// messages (appkit.Snapshots), so a replica that lost its data or never
// had it is rebuilt from its primary.
func (f *Forum) Service() neptune.Service {
	return neptune.Service{
		Name: "forum",
		Methods: []neptune.Method{
			{Name: "AddMsg", Mode: neptune.Write, Handler: f.addMsg},
			{Name: "ViewHeaders", Mode: neptune.Read, Handler: f.viewHeaders},
			{Name: "ViewMsg", Mode: neptune.Read, Handler: f.viewMsg},
			{Name: "Digest", Mode: neptune.Read, Handler: f.digest},
		},
		Check:     f.db.Check,
		Snapshots: f.Snapshots(),
	}
}

// Snapshots is the forum's snapshot pair (neptune.Snapshotter).
func (f *Forum) Snapshots() *appkit.Snapshots { return &appkit.Snapshots{DB: f.db, Tables: tables} }

func (f *Forum) addMsg(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	var in AddMsgRequest
	if err := appkit.Decode(ErrBadRequest, "AddMsg", r.Body, &in); err != nil {
		return nil, err
	}
	switch {
	case in.Topic == "":
		return nil, fmt.Errorf("%w: AddMsg: topic is empty", ErrBadRequest)
	case in.Author == "":
		return nil, fmt.Errorf("%w: AddMsg: author is empty", ErrBadRequest)
	case in.Subject == "":
		return nil, fmt.Errorf("%w: AddMsg: subject is empty", ErrBadRequest)
	case in.ReplyTo < 0:
		return nil, fmt.Errorf("%w: AddMsg: reply_to %d is negative", ErrBadRequest, in.ReplyTo)
	}
	var id int64
	applied, err := f.db.Write(ctx, r.Partition, r.LSN, func(tx *sql.Tx) error {
		if in.ReplyTo != 0 {
			var topic string
			err := tx.QueryRowContext(ctx, `SELECT topic FROM forum_msg WHERE part = $1 AND id = $2`, r.Partition, in.ReplyTo).Scan(&topic)
			if errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("%w: reply_to %d in partition %d", ErrUnknownMessage, in.ReplyTo, r.Partition)
			}
			if err != nil {
				return fmt.Errorf("forum: AddMsg: %w", err)
			}
			if topic != in.Topic {
				return fmt.Errorf("%w: reply_to %d is in topic %q, not %q", ErrBadRequest, in.ReplyTo, topic, in.Topic)
			}
		}
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) + 1 FROM forum_msg WHERE part = $1`, r.Partition).Scan(&id); err != nil {
			return fmt.Errorf("forum: AddMsg: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO forum_msg (part, id, topic, reply_to, author, subject, body) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
			r.Partition, id, in.Topic, in.ReplyTo, in.Author, in.Subject, in.Body)
		if err != nil {
			return fmt.Errorf("forum: AddMsg: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &neptune.Response{Body: appkit.Encode(AddMsgResponse{ID: id, Replayed: !applied}), Version: r.LSN}, nil
}

func (f *Forum) viewHeaders(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	var in ViewHeadersRequest
	if err := appkit.Decode(ErrBadRequest, "ViewHeaders", r.Body, &in); err != nil {
		return nil, err
	}
	if in.Topic == "" {
		return nil, fmt.Errorf("%w: ViewHeaders: topic is empty", ErrBadRequest)
	}
	rows, err := f.db.QueryContext(ctx, `SELECT id, reply_to, author, subject FROM forum_msg WHERE part = $1 AND topic = $2 ORDER BY id`, r.Partition, in.Topic)
	if err != nil {
		return nil, fmt.Errorf("forum: ViewHeaders: %w", err)
	}
	defer rows.Close()
	type row struct {
		h       Header
		replyTo int64
	}
	var all []row
	for rows.Next() {
		var x row
		if err := rows.Scan(&x.h.ID, &x.replyTo, &x.h.Author, &x.h.Subject); err != nil {
			return nil, fmt.Errorf("forum: ViewHeaders: %w", err)
		}
		all = append(all, x)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("forum: ViewHeaders: %w", err)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("%w: %q in partition %d", ErrUnknownTopic, in.Topic, r.Partition)
	}
	children := map[int64][]int{} // reply_to → indexes into all, in id order
	for i, x := range all {
		children[x.replyTo] = append(children[x.replyTo], i)
	}
	var build func(parent int64) []Header
	build = func(parent int64) []Header {
		var out []Header
		for _, i := range children[parent] {
			h := all[i].h
			h.Replies = build(h.ID)
			out = append(out, h)
		}
		return out
	}
	// Replies always have larger ids than their parent, so the tree has no
	// cycles and every message hangs under a thread root (reply_to 0).
	return &neptune.Response{Body: appkit.Encode(ViewHeadersResponse{Topic: in.Topic, Threads: build(0)})}, nil
}

func (f *Forum) viewMsg(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	var in ViewMsgRequest
	if err := appkit.Decode(ErrBadRequest, "ViewMsg", r.Body, &in); err != nil {
		return nil, err
	}
	m := Message{ID: in.ID}
	err := f.db.QueryRowContext(ctx, `SELECT topic, reply_to, author, subject, body FROM forum_msg WHERE part = $1 AND id = $2`, r.Partition, in.ID).
		Scan(&m.Topic, &m.ReplyTo, &m.Author, &m.Subject, &m.Body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: id %d in partition %d", ErrUnknownMessage, in.ID, r.Partition)
	}
	if err != nil {
		return nil, fmt.Errorf("forum: ViewMsg: %w", err)
	}
	return &neptune.Response{Body: appkit.Encode(m)}, nil
}

// digest reads the LSN and the messages in one statement, so both come
// from one snapshot on SQLite and PostgreSQL alike.
func (f *Forum) digest(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	if len(r.Body) > 0 {
		var in DigestRequest
		if err := appkit.Decode(ErrBadRequest, "Digest", r.Body, &in); err != nil {
			return nil, err
		}
	}
	rows, err := f.db.QueryContext(ctx, `SELECT l.lsn, m.id, m.topic, m.reply_to, m.author, m.subject, m.body
		FROM forum_lsn l LEFT JOIN forum_msg m ON m.part = l.part WHERE l.part = $1 ORDER BY m.id`, r.Partition)
	if err != nil {
		return nil, fmt.Errorf("forum: Digest: %w", err)
	}
	defer rows.Close()
	var out DigestResponse
	h := sha256.New()
	for rows.Next() {
		var (
			lsn int64
			id  sql.NullInt64
			m   Message
		)
		var topic, author, subject, body sql.NullString
		var replyTo sql.NullInt64
		if err := rows.Scan(&lsn, &id, &topic, &replyTo, &author, &subject, &body); err != nil {
			return nil, fmt.Errorf("forum: Digest: %w", err)
		}
		out.LSN = uint64(lsn)
		if !id.Valid {
			continue // the partition has an LSN row but no messages
		}
		m = Message{ID: id.Int64, Topic: topic.String, ReplyTo: replyTo.Int64, Author: author.String, Subject: subject.String, Body: body.String}
		h.Write(appkit.Encode(m))
		h.Write([]byte{'\n'})
		out.Messages++
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("forum: Digest: %w", err)
	}
	out.SHA256 = hex.EncodeToString(h.Sum(nil))
	return &neptune.Response{Body: appkit.Encode(out)}, nil
}
