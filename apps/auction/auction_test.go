package auction_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/neptune-cluster/neptune"
	"github.com/neptune-cluster/neptune/apps/auction"
	"github.com/neptune-cluster/neptune/apps/internal/appkit/appkittest"
)

var call = appkittest.Call

func mustCall[T any](t *testing.T, svc neptune.Service, method string, part int, lsn uint64, body any) T {
	t.Helper()
	return appkittest.MustCall[T](t, svc, method, part, lsn, body)
}

func open(t *testing.T, dsn string) *auction.Auction {
	t.Helper()
	a, err := auction.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func TestAuction(t *testing.T) {
	for _, be := range appkittest.Backends() {
		t.Run(be.Name, func(t *testing.T) {
			dsn := be.DSN(t)
			t.Run("methods", func(t *testing.T) { testMethods(t, open(t, dsn).Service()) })
			t.Run("bad input", func(t *testing.T) { testBadInput(t, open(t, dsn).Service()) })
			t.Run("lsn", func(t *testing.T) { testLSN(t, dsn) })
			t.Run("racing bids", func(t *testing.T) { testRacingBids(t, open(t, dsn).Service()) })
		})
	}
}

func addItem(t *testing.T, svc neptune.Service, part int, lsn uint64, in auction.AddItemRequest) int64 {
	t.Helper()
	return mustCall[auction.AddItemResponse](t, svc, "AddItem", part, lsn, in).ID
}

func testMethods(t *testing.T, svc neptune.Service) {
	const p = 1
	if got := mustCall[auction.ViewCategoriesResponse](t, svc, "ViewCategories", p, 0, ""); len(got.Categories) != 0 {
		t.Fatalf("empty partition has categories %+v", got)
	}
	lamp := addItem(t, svc, p, 0, auction.AddItemRequest{Category: "home", Title: "lamp", Seller: "sue", StartPrice: 500})
	bike := addItem(t, svc, p, 0, auction.AddItemRequest{Category: "sport", Title: "bike", Seller: "sam", StartPrice: 10000})
	chair := addItem(t, svc, p, 0, auction.AddItemRequest{Category: "home", Title: "chair", Seller: "sue", StartPrice: 0})
	if lamp != 1 || bike != 2 || chair != 3 {
		t.Fatalf("ids %d %d %d, want 1 2 3", lamp, bike, chair)
	}
	for _, b := range []auction.BidItemRequest{{Item: lamp, Bidder: "al", Amount: 500}, {Item: lamp, Bidder: "bo", Amount: 650}, {Item: chair, Bidder: "al", Amount: 1}} {
		got := mustCall[auction.BidItemResponse](t, svc, "BidItem", p, 0, b)
		if got.Price != b.Amount || got.Item != b.Item {
			t.Fatalf("BidItem(%+v) = %+v", b, got)
		}
	}
	cats := mustCall[auction.ViewCategoriesResponse](t, svc, "ViewCategories", p, 0, "{}")
	if want := []auction.Category{{Name: "home", Items: 2}, {Name: "sport", Items: 1}}; !reflect.DeepEqual(cats.Categories, want) {
		t.Fatalf("ViewCategories = %+v, want %+v", cats.Categories, want)
	}
	home := mustCall[auction.ViewCategoryResponse](t, svc, "ViewCategory", p, 0, auction.ViewCategoryRequest{Category: "home"})
	if want := []auction.ItemSummary{{ID: lamp, Title: "lamp", Price: 650, Bids: 2}, {ID: chair, Title: "chair", Price: 1, Bids: 1}}; !reflect.DeepEqual(home.Items, want) {
		t.Fatalf("ViewCategory(home) = %+v, want %+v", home.Items, want)
	}
	it := mustCall[auction.Item](t, svc, "ViewItem", p, 0, auction.ViewItemRequest{ID: lamp})
	want := auction.Item{ID: lamp, Category: "home", Title: "lamp", Seller: "sue", StartPrice: 500, Price: 650,
		Bids: []auction.Bid{{Bidder: "al", Amount: 500}, {Bidder: "bo", Amount: 650}}}
	if !reflect.DeepEqual(it, want) {
		t.Fatalf("ViewItem = %+v, want %+v", it, want)
	}
	if it := mustCall[auction.Item](t, svc, "ViewItem", p, 0, auction.ViewItemRequest{ID: bike}); len(it.Bids) != 0 || it.Price != 10000 {
		t.Fatalf("unbid item = %+v", it)
	}
}

func testBadInput(t *testing.T, svc neptune.Service) {
	const p = 2
	item := addItem(t, svc, p, 0, auction.AddItemRequest{Category: "c", Title: "t", Seller: "s", StartPrice: 100})
	mustCall[auction.BidItemResponse](t, svc, "BidItem", p, 0, auction.BidItemRequest{Item: item, Bidder: "b", Amount: 200})
	for _, tc := range []struct {
		name, method string
		body         any
		want         error
		text         string
	}{
		{"not json", "AddItem", "lamp", auction.ErrBadRequest, "AddItem"},
		{"unknown field", "BidItem", `{"item":1,"bidder":"b","amount":300,"price":1}`, auction.ErrBadRequest, "price"},
		{"string amount", "BidItem", `{"item":1,"bidder":"b","amount":"300"}`, auction.ErrBadRequest, "BidItem"},
		{"no category", "AddItem", auction.AddItemRequest{Title: "t", Seller: "s"}, auction.ErrBadRequest, "category is empty"},
		{"no title", "AddItem", auction.AddItemRequest{Category: "c", Seller: "s"}, auction.ErrBadRequest, "title is empty"},
		{"no seller", "AddItem", auction.AddItemRequest{Category: "c", Title: "t"}, auction.ErrBadRequest, "seller is empty"},
		{"negative price", "AddItem", auction.AddItemRequest{Category: "c", Title: "t", Seller: "s", StartPrice: -1}, auction.ErrBadRequest, "negative"},
		{"no bidder", "BidItem", auction.BidItemRequest{Item: item, Amount: 999}, auction.ErrBadRequest, "bidder is empty"},
		{"bid on unknown item", "BidItem", auction.BidItemRequest{Item: 77, Bidder: "b", Amount: 999}, auction.ErrUnknownItem, "id 77"},
		{"bid below price", "BidItem", auction.BidItemRequest{Item: item, Bidder: "b", Amount: 150}, auction.ErrBidTooLow, "current price 200"},
		{"bid equal to price", "BidItem", auction.BidItemRequest{Item: item, Bidder: "b", Amount: 200}, auction.ErrBidTooLow, "bid 200"},
		{"unknown category", "ViewCategory", auction.ViewCategoryRequest{Category: "none"}, auction.ErrUnknownCategory, `"none"`},
		{"unknown item", "ViewItem", auction.ViewItemRequest{ID: 77}, auction.ErrUnknownItem, "id 77"},
		{"ViewCategories with a body", "ViewCategories", `{"category":"c"}`, auction.ErrBadRequest, "ViewCategories"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(t, svc, tc.method, p, 0, tc.body)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tc.want, tc.text)
			}
		})
	}
	// Nothing half-written: one item, one bid, price unchanged.
	it := mustCall[auction.Item](t, svc, "ViewItem", p, 0, auction.ViewItemRequest{ID: item})
	if it.Price != 200 || len(it.Bids) != 1 {
		t.Fatalf("after rejected writes, item = %+v", it)
	}
	cats := mustCall[auction.ViewCategoriesResponse](t, svc, "ViewCategories", p, 0, "")
	if want := []auction.Category{{Name: "c", Items: 1}}; !reflect.DeepEqual(cats.Categories, want) {
		t.Fatalf("after rejected writes, categories = %+v", cats.Categories)
	}
	// The first bid may equal the start price.
	other := addItem(t, svc, p, 0, auction.AddItemRequest{Category: "c", Title: "u", Seller: "s", StartPrice: 100})
	if _, err := call(t, svc, "BidItem", p, 0, auction.BidItemRequest{Item: other, Bidder: "b", Amount: 99}); !errors.Is(err, auction.ErrBidTooLow) {
		t.Fatalf("first bid below start price: err = %v", err)
	}
	mustCall[auction.BidItemResponse](t, svc, "BidItem", p, 0, auction.BidItemRequest{Item: other, Bidder: "b", Amount: 100})
}

func testLSN(t *testing.T, dsn string) {
	const p = 3
	ctx := context.Background()
	a := open(t, dsn)
	svc := a.Service()
	item := addItem(t, svc, p, 10, auction.AddItemRequest{Category: "c", Title: "t", Seller: "s", StartPrice: 1})
	mustCall[auction.BidItemResponse](t, svc, "BidItem", p, 11, auction.BidItemRequest{Item: item, Bidder: "b", Amount: 5})
	if _, err := call(t, svc, "BidItem", p, 12, auction.BidItemRequest{Item: item, Bidder: "b", Amount: 4}); !errors.Is(err, auction.ErrBidTooLow) {
		t.Fatalf("low bid: %v", err)
	}
	for lsn, want := range map[uint64]bool{1: true, 10: true, 11: true, 12: false} {
		if ok, err := svc.Check(ctx, p, lsn); ok != want || err != nil {
			t.Fatalf("Check(%d) = %v, %v; want %v", lsn, ok, err, want)
		}
	}
	// Replaying LSN 11 with a different body writes nothing.
	r := mustCall[auction.BidItemResponse](t, svc, "BidItem", p, 11, auction.BidItemRequest{Item: item, Bidder: "b", Amount: 50})
	if !r.Replayed {
		t.Fatalf("replay = %+v", r)
	}
	a.Close()
	svc = open(t, dsn).Service()
	if it := mustCall[auction.Item](t, svc, "ViewItem", p, 0, auction.ViewItemRequest{ID: item}); it.Price != 5 || len(it.Bids) != 1 {
		t.Fatalf("after replay and reopen, item = %+v", it)
	}
	if ok, _ := svc.Check(ctx, p, 11); !ok {
		t.Fatal("LSN 11 lost on reopen")
	}
}

// testRacingBids sends increasing bids from parallel bidders: every
// accepted bid exceeds the one before it, whatever the interleaving.
func testRacingBids(t *testing.T, svc neptune.Service) {
	const p, bidders, each = 4, 4, 10
	item := addItem(t, svc, p, 0, auction.AddItemRequest{Category: "c", Title: "t", Seller: "s", StartPrice: 1})
	var wg sync.WaitGroup
	for b := range bidders {
		wg.Go(func() {
			for i := range each {
				_, err := call(t, svc, "BidItem", p, 0, auction.BidItemRequest{Item: item, Bidder: "b", Amount: int64(1 + i*bidders + b)})
				if err != nil && !errors.Is(err, auction.ErrBidTooLow) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	it := mustCall[auction.Item](t, svc, "ViewItem", p, 0, auction.ViewItemRequest{ID: item})
	if len(it.Bids) == 0 || it.Price != it.Bids[len(it.Bids)-1].Amount {
		t.Fatalf("item = %+v", it)
	}
	for i := 1; i < len(it.Bids); i++ {
		if it.Bids[i].Amount <= it.Bids[i-1].Amount {
			t.Fatalf("bid %d (%d) does not exceed bid %d (%d)", i, it.Bids[i].Amount, i-1, it.Bids[i-1].Amount)
		}
	}
}

// The auction's snapshots on each backend (appkittest.TestSnapshots):
// odd writes add an item, even ones bid on the item before (a bid row
// and the item's price).
func TestSnapshots(t *testing.T) {
	for _, be := range appkittest.Backends() {
		t.Run(be.Name, func(t *testing.T) {
			items := map[int]int64{}
			appkittest.TestSnapshots(t, be.DSN, func(t *testing.T, dsn string) appkittest.Store { return open(t, dsn) },
				func(t *testing.T, svc neptune.Service, part int, lsn uint64) {
					if lsn%2 == 1 {
						items[part] = addItem(t, svc, part, lsn, auction.AddItemRequest{Category: fmt.Sprintf("c%d", lsn%3), Title: "lamp", Seller: "sam", StartPrice: 100})
						return
					}
					mustCall[auction.BidItemResponse](t, svc, "BidItem", part, lsn, auction.BidItemRequest{Item: items[part], Bidder: "bea", Amount: 200})
				},
				func(t *testing.T, svc neptune.Service, part int) int {
					n := 0
					for _, c := range mustCall[auction.ViewCategoriesResponse](t, svc, "ViewCategories", part, 0, struct{}{}).Categories {
						for _, it := range mustCall[auction.ViewCategoryResponse](t, svc, "ViewCategory", part, 0, auction.ViewCategoryRequest{Category: c.Name}).Items {
							n += 1 + len(mustCall[auction.Item](t, svc, "ViewItem", part, 0, auction.ViewItemRequest{ID: it.ID}).Bids)
						}
					}
					return n
				})
		})
	}
}
