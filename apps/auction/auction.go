// Package auction is the dissertation's online-auction service: items for
// sale in categories, partitioned by category, with bids that must beat
// the current price. Stored in SQLite (embedded default) or PostgreSQL.
//
// Every method takes and returns JSON (types below); prices are integer
// cents. A client picks the partition of a category with
// Partition(category, n). Item ids are numbered per partition inside the
// write's transaction, so replicas applying writes in LSN order agree.
//
// The paper runs the auction at consistency level 3 with a 1 s staleness
// bound, so that no user sees a price go down between two of their calls;
// that guarantee comes from replication (sessions and Response.Version),
// not from this package: a single copy of the data never goes back.
package auction

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/internal/appkit"
)

// Errors a call can return (wrapped, with the offending value).
var (
	ErrBadRequest      = errors.New("auction: malformed request")
	ErrUnknownCategory = errors.New("auction: unknown category")
	ErrUnknownItem     = errors.New("auction: unknown item")
	ErrBidTooLow       = errors.New("auction: bid is not above the current price")
)

// AddItemRequest is the body of AddItem (write); the category is created
// with its first item.
type AddItemRequest struct {
	Category   string `json:"category"`
	Title      string `json:"title"`
	Seller     string `json:"seller"`
	StartPrice int64  `json:"start_price"`
}

// AddItemResponse answers AddItem. Replayed is true when the request's LSN
// had already been applied: nothing was written again and ID is 0.
type AddItemResponse struct {
	ID       int64 `json:"id"`
	Replayed bool  `json:"replayed,omitempty"`
}

// BidItemRequest is the body of BidItem (write). The first bid must be at
// least the start price; later bids must exceed the current price.
type BidItemRequest struct {
	Item   int64  `json:"item"`
	Bidder string `json:"bidder"`
	Amount int64  `json:"amount"`
}

// BidItemResponse answers BidItem with the item's new price.
type BidItemResponse struct {
	Item     int64 `json:"item"`
	Price    int64 `json:"price"`
	Replayed bool  `json:"replayed,omitempty"`
}

// Category is one entry of ViewCategories.
type Category struct {
	Name  string `json:"name"`
	Items int    `json:"items"`
}

// ViewCategoriesResponse answers ViewCategories (read, empty body or {}):
// the partition's categories by name.
type ViewCategoriesResponse struct {
	Categories []Category `json:"categories"`
}

// ViewCategoryRequest is the body of ViewCategory (read).
type ViewCategoryRequest struct {
	Category string `json:"category"`
}

// ItemSummary is an item in a category listing.
type ItemSummary struct {
	ID    int64  `json:"id"`
	Title string `json:"title"`
	Price int64  `json:"price"`
	Bids  int    `json:"bids"`
}

// ViewCategoryResponse lists a category's items by id.
type ViewCategoryResponse struct {
	Category string        `json:"category"`
	Items    []ItemSummary `json:"items"`
}

// ViewItemRequest is the body of ViewItem (read).
type ViewItemRequest struct {
	ID int64 `json:"id"`
}

// Bid is one accepted bid.
type Bid struct {
	Bidder string `json:"bidder"`
	Amount int64  `json:"amount"`
}

// Item is ViewItem's answer; Bids are in the order they were accepted.
type Item struct {
	ID         int64  `json:"id"`
	Category   string `json:"category"`
	Title      string `json:"title"`
	Seller     string `json:"seller"`
	StartPrice int64  `json:"start_price"`
	Price      int64  `json:"price"`
	Bids       []Bid  `json:"bids"`
}

var schema = []string{
	`CREATE TABLE IF NOT EXISTS auction_item (
		part INTEGER NOT NULL, id BIGINT NOT NULL, category TEXT NOT NULL, title TEXT NOT NULL,
		seller TEXT NOT NULL, start_price BIGINT NOT NULL, price BIGINT NOT NULL, bids INTEGER NOT NULL,
		PRIMARY KEY (part, id))`,
	`CREATE INDEX IF NOT EXISTS auction_item_category ON auction_item (part, category, id)`,
	`CREATE TABLE IF NOT EXISTS auction_bid (
		part INTEGER NOT NULL, item BIGINT NOT NULL, seq INTEGER NOT NULL, bidder TEXT NOT NULL, amount BIGINT NOT NULL,
		PRIMARY KEY (part, item, seq))`,
}

// tables is the schema as snapshots see it.
var tables = []appkit.Table{
	{Name: "auction_item", Columns: []string{"id", "category", "title", "seller", "start_price", "price", "bids"}, Key: []string{"id"}},
	{Name: "auction_bid", Columns: []string{"item", "seq", "bidder", "amount"}, Key: []string{"item", "seq"}},
}

// Auction is one node's auction store. Safe for concurrent use.
type Auction struct{ db *appkit.DB }

// Open opens (creating if needed) the auction's tables in the database
// named by dsn: a postgres:// URL, an SQLite file path, or "" for a private
// in-memory SQLite database. Each node must have its own database.
func Open(ctx context.Context, dsn string) (*Auction, error) {
	db, err := appkit.Open(ctx, dsn, "auction_lsn", schema)
	if err != nil {
		return nil, fmt.Errorf("auction: %w", err)
	}
	return &Auction{db: db}, nil
}

// Close closes the database.
func (a *Auction) Close() error { return a.db.Close() }

// Partition is the partition of category among n.
func Partition(category string, n int) int { return appkit.Partition(category, n) }

// Service returns the auction service: AddItem and BidItem (write),
// ViewCategories, ViewCategory and ViewItem (read), CHECK, and snapshots
// of a partition's items and bids (appkit.Snapshots).
func (a *Auction) Service() neptune.Service {
	return neptune.Service{
		Name: "auction",
		Methods: []neptune.Method{
			{Name: "AddItem", Mode: neptune.Write, Handler: a.addItem},
			{Name: "BidItem", Mode: neptune.Write, Handler: a.bidItem},
			{Name: "ViewCategories", Mode: neptune.Read, Handler: a.viewCategories},
			{Name: "ViewCategory", Mode: neptune.Read, Handler: a.viewCategory},
			{Name: "ViewItem", Mode: neptune.Read, Handler: a.viewItem},
		},
		Check:     a.db.Check,
		Snapshots: a.Snapshots(),
	}
}

// Snapshots is the auction's snapshot pair (neptune.Snapshotter).
func (a *Auction) Snapshots() *appkit.Snapshots { return &appkit.Snapshots{DB: a.db, Tables: tables} }

func (a *Auction) addItem(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	var in AddItemRequest
	if err := appkit.Decode(ErrBadRequest, "AddItem", r.Body, &in); err != nil {
		return nil, err
	}
	switch {
	case in.Category == "":
		return nil, fmt.Errorf("%w: AddItem: category is empty", ErrBadRequest)
	case in.Title == "":
		return nil, fmt.Errorf("%w: AddItem: title is empty", ErrBadRequest)
	case in.Seller == "":
		return nil, fmt.Errorf("%w: AddItem: seller is empty", ErrBadRequest)
	case in.StartPrice < 0:
		return nil, fmt.Errorf("%w: AddItem: start_price %d is negative", ErrBadRequest, in.StartPrice)
	}
	var id int64
	applied, err := a.db.Write(ctx, r.Partition, r.LSN, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) + 1 FROM auction_item WHERE part = $1`, r.Partition).Scan(&id); err != nil {
			return fmt.Errorf("auction: AddItem: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO auction_item (part, id, category, title, seller, start_price, price, bids) VALUES ($1, $2, $3, $4, $5, $6, $6, 0)`,
			r.Partition, id, in.Category, in.Title, in.Seller, in.StartPrice)
		if err != nil {
			return fmt.Errorf("auction: AddItem: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &neptune.Response{Body: appkit.Encode(AddItemResponse{ID: id, Replayed: !applied}), Version: r.LSN}, nil
}

func (a *Auction) bidItem(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	var in BidItemRequest
	if err := appkit.Decode(ErrBadRequest, "BidItem", r.Body, &in); err != nil {
		return nil, err
	}
	if in.Bidder == "" {
		return nil, fmt.Errorf("%w: BidItem: bidder is empty", ErrBadRequest)
	}
	applied, err := a.db.Write(ctx, r.Partition, r.LSN, func(tx *sql.Tx) error {
		var price int64
		var bids int
		err := tx.QueryRowContext(ctx, `SELECT price, bids FROM auction_item WHERE part = $1 AND id = $2`, r.Partition, in.Item).Scan(&price, &bids)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: id %d in partition %d", ErrUnknownItem, in.Item, r.Partition)
		}
		if err != nil {
			return fmt.Errorf("auction: BidItem: %w", err)
		}
		if in.Amount < price || (bids > 0 && in.Amount == price) {
			return fmt.Errorf("%w: item %d: bid %d, current price %d (%d bids)", ErrBidTooLow, in.Item, in.Amount, price, bids)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO auction_bid (part, item, seq, bidder, amount) VALUES ($1, $2, $3, $4, $5)`,
			r.Partition, in.Item, bids+1, in.Bidder, in.Amount); err != nil {
			return fmt.Errorf("auction: BidItem: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `UPDATE auction_item SET price = $1, bids = $2 WHERE part = $3 AND id = $4`,
			in.Amount, bids+1, r.Partition, in.Item); err != nil {
			return fmt.Errorf("auction: BidItem: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &neptune.Response{Body: appkit.Encode(BidItemResponse{Item: in.Item, Price: in.Amount, Replayed: !applied}), Version: r.LSN}, nil
}

func (a *Auction) viewCategories(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	if len(r.Body) > 0 {
		var in struct{}
		if err := appkit.Decode(ErrBadRequest, "ViewCategories", r.Body, &in); err != nil {
			return nil, err
		}
	}
	rows, err := a.db.QueryContext(ctx, `SELECT category, COUNT(*) FROM auction_item WHERE part = $1 GROUP BY category ORDER BY category`, r.Partition)
	if err != nil {
		return nil, fmt.Errorf("auction: ViewCategories: %w", err)
	}
	defer rows.Close()
	out := ViewCategoriesResponse{Categories: []Category{}}
	for rows.Next() {
		var c Category
		if err := rows.Scan(&c.Name, &c.Items); err != nil {
			return nil, fmt.Errorf("auction: ViewCategories: %w", err)
		}
		out.Categories = append(out.Categories, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auction: ViewCategories: %w", err)
	}
	return &neptune.Response{Body: appkit.Encode(out)}, nil
}

func (a *Auction) viewCategory(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	var in ViewCategoryRequest
	if err := appkit.Decode(ErrBadRequest, "ViewCategory", r.Body, &in); err != nil {
		return nil, err
	}
	if in.Category == "" {
		return nil, fmt.Errorf("%w: ViewCategory: category is empty", ErrBadRequest)
	}
	rows, err := a.db.QueryContext(ctx, `SELECT id, title, price, bids FROM auction_item WHERE part = $1 AND category = $2 ORDER BY id`, r.Partition, in.Category)
	if err != nil {
		return nil, fmt.Errorf("auction: ViewCategory: %w", err)
	}
	defer rows.Close()
	out := ViewCategoryResponse{Category: in.Category}
	for rows.Next() {
		var it ItemSummary
		if err := rows.Scan(&it.ID, &it.Title, &it.Price, &it.Bids); err != nil {
			return nil, fmt.Errorf("auction: ViewCategory: %w", err)
		}
		out.Items = append(out.Items, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auction: ViewCategory: %w", err)
	}
	if len(out.Items) == 0 {
		return nil, fmt.Errorf("%w: %q in partition %d", ErrUnknownCategory, in.Category, r.Partition)
	}
	return &neptune.Response{Body: appkit.Encode(out)}, nil
}

func (a *Auction) viewItem(ctx context.Context, r *neptune.Request) (*neptune.Response, error) {
	var in ViewItemRequest
	if err := appkit.Decode(ErrBadRequest, "ViewItem", r.Body, &in); err != nil {
		return nil, err
	}
	// One statement, so the price and the bid list come from one snapshot
	// on both databases.
	rows, err := a.db.QueryContext(ctx, `SELECT i.category, i.title, i.seller, i.start_price, i.price, b.bidder, b.amount
		FROM auction_item i LEFT JOIN auction_bid b ON b.part = i.part AND b.item = i.id
		WHERE i.part = $1 AND i.id = $2 ORDER BY b.seq`, r.Partition, in.ID)
	if err != nil {
		return nil, fmt.Errorf("auction: ViewItem: %w", err)
	}
	defer rows.Close()
	it := Item{ID: in.ID, Bids: []Bid{}}
	found := false
	for rows.Next() {
		var bidder sql.NullString
		var amount sql.NullInt64
		if err := rows.Scan(&it.Category, &it.Title, &it.Seller, &it.StartPrice, &it.Price, &bidder, &amount); err != nil {
			return nil, fmt.Errorf("auction: ViewItem: %w", err)
		}
		found = true
		if bidder.Valid {
			it.Bids = append(it.Bids, Bid{Bidder: bidder.String, Amount: amount.Int64})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("auction: ViewItem: %w", err)
	}
	if !found {
		return nil, fmt.Errorf("%w: id %d in partition %d", ErrUnknownItem, in.ID, r.Partition)
	}
	return &neptune.Response{Body: appkit.Encode(it)}, nil
}
