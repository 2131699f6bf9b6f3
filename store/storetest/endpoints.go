package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gantryhq/gantry/core"
)

// RunEndpointStore runs the conformance suite of core.EndpointStore.
func RunEndpointStore(t *testing.T, open Opener[core.EndpointStore]) {
	t.Helper()
	run(t, suite[core.Endpoint]{
		kind: "Endpoint",
		open: func(t *testing.T) (store[core.Endpoint], func() store[core.Endpoint]) {
			s, reopen := open(t)
			return endpointStore{s}, adaptReopen(reopen, func(s core.EndpointStore) store[core.Endpoint] { return endpointStore{s} })
		},
		sample: sampleEndpoint,
		id:     func(e core.Endpoint) string { return e.ID },
		owner:  func(e core.Endpoint) string { return e.Owner },
		name:   func(e core.Endpoint) string { return e.Name },
		update: func(e core.Endpoint, name string, at time.Time) core.Endpoint {
			e.Name, e.UpdatedAt = name, at
			e.Env = map[string]string{"UPDATED": "1"}
			e.Registry = nil
			e.Workers.Max++
			return e
		},
		mutate: func(e *core.Endpoint) {
			e.Env["HF_HOME"] = "/changed"
			e.Ports[0] = "1/tcp"
			e.GPU.Pools[0] = "changed"
			*e.Registry = "changed"
		},
		same: sameEndpoint,
	})
}

// RunTemplateStore runs the conformance suite of core.TemplateStore.
func RunTemplateStore(t *testing.T, open Opener[core.TemplateStore]) {
	t.Helper()
	run(t, suite[core.Template]{
		kind: "Template",
		open: func(t *testing.T) (store[core.Template], func() store[core.Template]) {
			s, reopen := open(t)
			return templateStore{s}, adaptReopen(reopen, func(s core.TemplateStore) store[core.Template] { return templateStore{s} })
		},
		sample: sampleTemplate,
		id:     func(tp core.Template) string { return tp.ID },
		owner:  func(tp core.Template) string { return tp.Owner },
		name:   func(tp core.Template) string { return tp.Name },
		update: func(tp core.Template, name string, at time.Time) core.Template {
			tp.Name, tp.UpdatedAt = name, at
			tp.Env = map[string]string{"UPDATED": "1"}
			tp.Registry = nil
			tp.StartJupyter = !tp.StartJupyter
			return tp
		},
		mutate: func(tp *core.Template) {
			tp.Env["HF_HOME"] = "/changed"
			tp.Ports[0] = "1/tcp"
			tp.AllowedCudaVersions[0] = "9.9"
			*tp.Registry = "changed"
		},
		same: sameTemplate,
	})
}

// adaptReopen wraps what reopen returns with as; nil stays nil.
func adaptReopen[S, A any](reopen func() S, as func(S) A) func() A {
	if reopen == nil {
		return nil
	}
	return func() A { return as(reopen()) }
}

// store is the common shape of the two store interfaces.
type store[T any] interface {
	Put(ctx context.Context, v T) error
	Get(ctx context.Context, id string) (T, error)
	List(ctx context.Context, owner, cursor string, limit int) ([]T, string, error)
	Delete(ctx context.Context, id string) error
}

type endpointStore struct{ s core.EndpointStore }

func (a endpointStore) Put(ctx context.Context, e core.Endpoint) error {
	return a.s.PutEndpoint(ctx, e)
}
func (a endpointStore) Get(ctx context.Context, id string) (core.Endpoint, error) {
	return a.s.GetEndpoint(ctx, id)
}
func (a endpointStore) List(ctx context.Context, owner, cursor string, limit int) ([]core.Endpoint, string, error) {
	return a.s.ListEndpoints(ctx, owner, cursor, limit)
}
func (a endpointStore) Delete(ctx context.Context, id string) error {
	return a.s.DeleteEndpoint(ctx, id)
}

type templateStore struct{ s core.TemplateStore }

func (a templateStore) Put(ctx context.Context, tp core.Template) error {
	return a.s.PutTemplate(ctx, tp)
}
func (a templateStore) Get(ctx context.Context, id string) (core.Template, error) {
	return a.s.GetTemplate(ctx, id)
}
func (a templateStore) List(ctx context.Context, owner, cursor string, limit int) ([]core.Template, string, error) {
	return a.s.ListTemplates(ctx, owner, cursor, limit)
}
func (a templateStore) Delete(ctx context.Context, id string) error {
	return a.s.DeleteTemplate(ctx, id)
}

// suite describes one record type to the shared tests.
type suite[T any] struct {
	kind   string // "Endpoint" or "Template", for messages: PutEndpoint, GetTemplate, ...
	open   func(t *testing.T) (store[T], func() store[T])
	sample func(id, owner string, created time.Time) T // a record with every field set
	id     func(T) string
	owner  func(T) string
	name   func(T) string
	update func(v T, name string, at time.Time) T // changes fields but not id, owner or creation
	mutate func(v *T)                             // writes through every slice, map and pointer
	same   func(got, want T) bool
}

func run[T any](t *testing.T, s suite[T]) {
	ctx := context.Background()
	put, get, list, del := "Put"+s.kind, "Get"+s.kind, "List"+s.kind+"s", "Delete"+s.kind

	// seed stores n records of owner, created one second apart. They are put in an order other
	// than creation order, with ids that sort against it, so that neither insertion order nor
	// id order passes for creation order. It returns the records in creation order.
	seed := func(t *testing.T, st store[T], owner string, n int) []T {
		t.Helper()
		recs := make([]T, n)
		for i := range recs {
			recs[i] = s.sample(fmt.Sprintf("%s%03d", owner, n-i), owner, base.Add(time.Duration(i)*time.Second))
		}
		for _, i := range putOrder(n) {
			if err := st.Put(ctx, recs[i]); err != nil {
				t.Fatalf("%s(%q) = %v; want nil", put, s.id(recs[i]), err)
			}
		}
		return recs
	}
	ids := func(recs []T) []string {
		out := make([]string, len(recs))
		for i, r := range recs {
			out[i] = s.id(r)
		}
		return out
	}
	// walk lists every page of owner's records with the given limit, checking each page's size
	// and that only the last page ends with an empty cursor.
	walk := func(t *testing.T, st store[T], owner string, limit int) []T {
		t.Helper()
		var all []T
		cursor := ""
		for page := 1; ; page++ {
			recs, next, err := st.List(ctx, owner, cursor, limit)
			if err != nil {
				t.Fatalf("%s(%q, %q, %d) page %d: err = %v; want nil", list, owner, cursor, limit, page, err)
			}
			if len(recs) > limit {
				t.Fatalf("%s(%q, %q, %d) page %d returned %d records; want at most %d", list, owner, cursor, limit, page, len(recs), limit)
			}
			all = append(all, recs...)
			if next == "" {
				if len(recs) == 0 && page > 1 {
					t.Errorf("%s(%q, %q, %d) page %d is empty; want the previous page to end the list", list, owner, cursor, limit, page)
				}
				return all
			}
			if len(recs) != limit {
				t.Fatalf("%s(%q, %q, %d) page %d returned %d records and cursor %q; want %d records before the last page", list, owner, cursor, limit, page, len(recs), next, limit)
			}
			if page > 1000 {
				t.Fatalf("%s(%q, ..., %d) has not ended after %d pages", list, owner, limit, page)
			}
			cursor = next
		}
	}

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		want := s.sample("rt1", "alice", base)
		if err := st.Put(ctx, want); err != nil {
			t.Fatalf("%s(%q) = %v; want nil", put, s.id(want), err)
		}
		got, err := st.Get(ctx, s.id(want))
		if err != nil {
			t.Fatalf("%s(%q) err = %v; want nil", get, s.id(want), err)
		}
		if !s.same(got, want) {
			t.Errorf("%s(%q) = %+v; want %+v", get, s.id(want), got, want)
		}
	})

	t.Run("NoAliasing", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		in := s.sample("alias1", "alice", base)
		want := s.sample("alias1", "alice", base)
		if err := st.Put(ctx, in); err != nil {
			t.Fatalf("%s(%q) = %v; want nil", put, s.id(in), err)
		}
		s.mutate(&in) // the caller reuses what it stored
		got, err := st.Get(ctx, "alias1")
		if err != nil {
			t.Fatalf("%s(%q) err = %v; want nil", get, "alias1", err)
		}
		if !s.same(got, want) {
			t.Errorf("after changing the value put, %s(%q) = %+v; want %+v", get, "alias1", got, want)
		}
		s.mutate(&got) // the caller changes what it read
		again, err := st.Get(ctx, "alias1")
		if err != nil {
			t.Fatalf("%s(%q) err = %v; want nil", get, "alias1", err)
		}
		if !s.same(again, want) {
			t.Errorf("after changing the value read, %s(%q) = %+v; want %+v", get, "alias1", again, want)
		}
	})

	t.Run("GetMissing", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		seed(t, st, "alice", 2)
		for _, id := range []string{"missing", "alice", "alice00"} {
			if _, err := st.Get(ctx, id); !errors.Is(err, core.ErrNotFound) {
				t.Errorf("%s(%q) err = %v; want core.ErrNotFound", get, id, err)
			}
		}
	})

	t.Run("Overwrite", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		orig := s.sample("ow1", "alice", base)
		if err := st.Put(ctx, orig); err != nil {
			t.Fatalf("%s(%q) = %v; want nil", put, s.id(orig), err)
		}
		want := s.update(orig, "renamed", base.Add(time.Hour))
		if err := st.Put(ctx, want); err != nil {
			t.Fatalf("%s(%q) again = %v; want nil", put, s.id(want), err)
		}
		got, err := st.Get(ctx, "ow1")
		if err != nil {
			t.Fatalf("%s(%q) err = %v; want nil", get, "ow1", err)
		}
		if !s.same(got, want) {
			t.Errorf("%s(%q) after update = %+v; want %+v", get, "ow1", got, want)
		}
		recs, next, err := st.List(ctx, "alice", "", 10)
		if err != nil || next != "" || len(recs) != 1 {
			t.Fatalf("%s(%q, \"\", 10) = %d records, %q, %v; want 1 record, \"\", nil", list, "alice", len(recs), next, err)
		}
		if !s.same(recs[0], want) {
			t.Errorf("%s(%q, \"\", 10)[0] = %+v; want %+v", list, "alice", recs[0], want)
		}
	})

	t.Run("ListCreationOrder", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		want := seed(t, st, "alice", 5)
		seed(t, st, "bob", 3)
		got, next, err := st.List(ctx, "alice", "", 100)
		if err != nil || next != "" {
			t.Fatalf("%s(%q, \"\", 100) cursor, err = %q, %v; want \"\", nil", list, "alice", next, err)
		}
		if !slices.Equal(ids(got), ids(want)) {
			t.Fatalf("%s(%q, \"\", 100) = %v; want %v", list, "alice", ids(got), ids(want))
		}
		for i := range got {
			if !s.same(got[i], want[i]) {
				t.Errorf("%s(%q, \"\", 100)[%d] = %+v; want %+v", list, "alice", i, got[i], want[i])
			}
		}
	})

	t.Run("ListEmpty", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		got, next, err := st.List(ctx, "nobody", "", 10)
		if err != nil || next != "" || len(got) != 0 {
			t.Errorf("%s(%q, \"\", 10) = %v, %q, %v; want [], \"\", nil", list, "nobody", ids(got), next, err)
		}
	})

	t.Run("Pagination", func(t *testing.T) {
		t.Parallel()
		tests := []struct{ n, limit int }{
			{7, 3},   // a short last page
			{6, 3},   // an exact multiple of the limit
			{3, 3},   // exactly one full page
			{2, 3},   // one short page
			{5, 1},   // one record a page
			{4, 100}, // all in one page
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("n=%d,limit=%d", tt.n, tt.limit), func(t *testing.T) {
				t.Parallel()
				st, _ := s.open(t)
				want := seed(t, st, "alice", tt.n)
				seed(t, st, "bob", 2)
				if got := walk(t, st, "alice", tt.limit); !slices.Equal(ids(got), ids(want)) {
					t.Errorf("walking %s(%q, ..., %d) = %v; want %v", list, "alice", tt.limit, ids(got), ids(want))
				}
			})
		}
	})

	t.Run("PaginationEqualCreationTimes", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		var want []string
		for _, id := range []string{"tie3", "tie1", "tie5", "tie2", "tie4"} {
			if err := st.Put(ctx, s.sample(id, "alice", base)); err != nil {
				t.Fatalf("%s(%q) = %v; want nil", put, id, err)
			}
			want = append(want, id)
		}
		got := ids(walk(t, st, "alice", 2))
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("walking %s(%q, ..., 2) over equal creation times = %v (sorted); want each of %v once", list, "alice", got, want)
		}
	})

	t.Run("BadCursor", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		seed(t, st, "alice", 3)
		for _, cursor := range []string{"bogus cursor", "%%%", "\x00", "../../etc"} {
			_, _, err := st.List(ctx, "alice", cursor, 10)
			if err == nil || core.KindOf(err) != core.KindInvalid {
				t.Errorf("%s(%q, %q, 10) err = %v (kind %v); want kind %v", list, "alice", cursor, err, core.KindOf(err), core.KindInvalid)
			}
		}
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		recs := seed(t, st, "alice", 5)
		gone := s.id(recs[2])
		if err := st.Delete(ctx, gone); err != nil {
			t.Fatalf("%s(%q) = %v; want nil", del, gone, err)
		}
		if _, err := st.Get(ctx, gone); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("%s(%q) after delete err = %v; want core.ErrNotFound", get, gone, err)
		}
		want := ids(slices.Delete(slices.Clone(recs), 2, 3))
		if got := ids(walk(t, st, "alice", 2)); !slices.Equal(got, want) {
			t.Errorf("walking %s(%q, ..., 2) after delete = %v; want %v", list, "alice", got, want)
		}
		if err := st.Delete(ctx, gone); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("%s(%q) twice err = %v; want core.ErrNotFound", del, gone, err)
		}
		// Re-creating the id works and lists it once.
		if err := st.Put(ctx, recs[2]); err != nil {
			t.Fatalf("%s(%q) after delete = %v; want nil", put, gone, err)
		}
		if got, want := ids(walk(t, st, "alice", 100)), ids(recs); !slices.Equal(got, want) {
			t.Errorf("walking %s(%q, ..., 100) after re-creating = %v; want %v", list, "alice", got, want)
		}
	})

	t.Run("DeleteMissing", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		seed(t, st, "alice", 1)
		if err := st.Delete(ctx, "missing"); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("%s(%q) err = %v; want core.ErrNotFound", del, "missing", err)
		}
		if got := walk(t, st, "alice", 10); len(got) != 1 {
			t.Errorf("walking %s(%q, ..., 10) after deleting a missing id = %v; want 1 record", list, "alice", ids(got))
		}
	})

	t.Run("ReputMovesIndex", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		if err := st.Put(ctx, s.sample("mv1", "alice", base)); err != nil {
			t.Fatal(err)
		}
		if err := st.Put(ctx, s.sample("mv1", "bob", base.Add(time.Hour))); err != nil {
			t.Fatal(err)
		}
		if got := ids(walk(t, st, "alice", 10)); len(got) != 0 {
			t.Errorf("%s(alice) after moving mv1 to bob = %v; want []", list, got)
		}
		if got := ids(walk(t, st, "bob", 10)); !slices.Equal(got, []string{"mv1"}) {
			t.Errorf("%s(bob) = %v; want [mv1]", list, got)
		}
	})

	t.Run("OldCreationTimes", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		for _, r := range []T{s.sample("old3", "carol", base), s.sample("old1", "carol", time.Time{}), s.sample("old2", "carol", time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC))} {
			if err := st.Put(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if got := ids(walk(t, st, "carol", 2)); !slices.Equal(got, []string{"old1", "old2", "old3"}) {
			t.Errorf("%s(carol) = %v; want [old1 old2 old3] (zero time, 1960, 2025)", list, got)
		}
	})

	t.Run("OwnersIsolated", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		// "al" is a prefix of "alice": a store that indexes by owner prefix must still keep them apart.
		owners := map[string][]string{
			"alice": ids(seed(t, st, "alice", 3)),
			"al":    ids(seed(t, st, "al", 2)),
			"bob":   ids(seed(t, st, "bob", 4)),
		}
		for owner, want := range owners {
			if got := ids(walk(t, st, owner, 2)); !slices.Equal(got, want) {
				t.Errorf("walking %s(%q, ..., 2) = %v; want %v", list, owner, got, want)
			}
		}
		if err := st.Delete(ctx, owners["bob"][0]); err != nil {
			t.Fatalf("%s(%q) = %v; want nil", del, owners["bob"][0], err)
		}
		if got := ids(walk(t, st, "alice", 10)); !slices.Equal(got, owners["alice"]) {
			t.Errorf("walking %s(%q, ..., 10) after deleting bob's = %v; want %v", list, "alice", got, owners["alice"])
		}
	})

	t.Run("ConcurrentPuts", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		// Each writer puts records of its own and overwrites one shared record, moving it
		// between two owners with a new creation time each time: the index must end with the
		// shared record once, under the owner it was last put with.
		const writers, each = 8, 6
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range each {
					own := s.sample(fmt.Sprintf("w%dr%d", w, i), "alice", base.Add(time.Duration(w*each+i)*time.Second))
					if err := st.Put(ctx, own); err != nil {
						t.Errorf("%s(%q) = %v; want nil", put, s.id(own), err)
					}
					owner := []string{"alice", "bob"}[(w+i)%2]
					shared := s.sample("shared", owner, base.Add(time.Duration(w*each+i)*time.Millisecond))
					if err := st.Put(ctx, shared); err != nil {
						t.Errorf("%s(%q) = %v; want nil", put, "shared", err)
					}
				}
			})
		}
		wg.Wait()
		last, err := st.Get(ctx, "shared")
		if err != nil {
			t.Fatalf("%s(%q) err = %v; want nil", get, "shared", err)
		}
		alice, bob := ids(walk(t, st, "alice", 7)), ids(walk(t, st, "bob", 7))
		if n := len(alice) - countOf(alice, "shared"); n != writers*each {
			t.Errorf("walking %s(alice) gave %d records besides the shared one; want %d", list, n, writers*each)
		}
		if got := countOf(alice, "shared") + countOf(bob, "shared"); got != 1 {
			t.Errorf("the shared record is listed %d times (alice %v, bob %v); want once", got, alice, bob)
		}
		owner := map[bool]string{true: "alice", false: "bob"}[countOf(alice, "shared") == 1]
		if got := s.owner(last); got != owner {
			t.Errorf("%s(%q) has owner %q but is listed under %q", get, "shared", got, owner)
		}
	})

	t.Run("ConcurrentDeleteAndPut", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		// One writer keeps re-creating a record under another owner and creation time while
		// another deletes it. However they interleave, the index must not keep an entry for a
		// version that is gone: it would list the record under an owner it no longer has.
		const rounds = 200
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range rounds {
				owner := []string{"alice", "bob"}[i%2]
				if err := st.Put(ctx, s.sample("flip", owner, base.Add(time.Duration(i)*time.Second))); err != nil {
					t.Errorf("%s(%q) = %v; want nil", put, "flip", err)
				}
			}
		})
		wg.Go(func() {
			for range rounds {
				if err := st.Delete(ctx, "flip"); err != nil && !errors.Is(err, core.ErrNotFound) {
					t.Errorf("%s(%q) = %v; want nil or core.ErrNotFound", del, "flip", err)
				}
			}
		})
		wg.Wait()
		want := s.sample("flip", "carol", base.Add(-time.Hour))
		if err := st.Put(ctx, want); err != nil {
			t.Fatalf("%s(%q) = %v; want nil", put, "flip", err)
		}
		for owner, want := range map[string][]string{"alice": nil, "bob": nil, "carol": {"flip"}} {
			if got := ids(walk(t, st, owner, 3)); !slices.Equal(got, want) {
				t.Errorf("walking %s(%q, ..., 3) = %v; want %v", list, owner, got, want)
			}
		}
	})

	t.Run("ContextDone", func(t *testing.T) {
		t.Parallel()
		st, _ := s.open(t)
		kept := s.sample("kept1", "alice", base)
		if err := st.Put(ctx, kept); err != nil {
			t.Fatalf("%s(%q) = %v; want nil", put, s.id(kept), err)
		}
		for _, dc := range doneContexts(t) {
			checkDone(t, dc, put+`("new1")`, st.Put(dc.ctx, s.sample("new1", "alice", base.Add(time.Second))))
			checkDone(t, dc, put+`("kept1") renamed`, st.Put(dc.ctx, s.update(kept, "renamed", base.Add(time.Hour))))
			_, err := st.Get(dc.ctx, "kept1")
			checkDone(t, dc, get+`("kept1")`, err)
			_, _, err = st.List(dc.ctx, "alice", "", 10)
			checkDone(t, dc, list+`("alice")`, err)
			checkDone(t, dc, del+`("kept1")`, st.Delete(dc.ctx, "kept1"))
		}
		// Nothing the refused calls asked for happened.
		if _, err := st.Get(ctx, "new1"); !errors.Is(err, core.ErrNotFound) {
			t.Errorf("%s(%q) after a refused put err = %v; want core.ErrNotFound", get, "new1", err)
		}
		got, err := st.Get(ctx, "kept1")
		if err != nil || !s.same(got, kept) {
			t.Errorf("%s(%q) after refused updates and deletes = %+v, %v; want %+v, nil", get, "kept1", got, err, kept)
		}
	})

	t.Run("Durable", func(t *testing.T) {
		t.Parallel()
		st, reopen := s.open(t)
		reopen = durable(t, reopen)
		recs := seed(t, st, "alice", 5)
		recs[1] = s.update(recs[1], "renamed", base.Add(time.Hour))
		if err := st.Put(ctx, recs[1]); err != nil {
			t.Fatalf("%s(%q) = %v; want nil", put, s.id(recs[1]), err)
		}
		if err := st.Delete(ctx, s.id(recs[3])); err != nil {
			t.Fatalf("%s(%q) = %v; want nil", del, s.id(recs[3]), err)
		}
		recs = slices.Delete(recs, 3, 4)
		page, cursor, err := st.List(ctx, "alice", "", 2)
		if err != nil || cursor == "" || len(page) != 2 {
			t.Fatalf("%s(%q, \"\", 2) = %d records, %q, %v; want 2 records and a cursor", list, "alice", len(page), cursor, err)
		}

		st = reopen()
		for _, want := range recs {
			got, err := st.Get(ctx, s.id(want))
			if err != nil || !s.same(got, want) {
				t.Errorf("%s(%q) after a restart = %+v, %v; want %+v, nil", get, s.id(want), got, err, want)
			}
		}
		if got := ids(walk(t, st, "alice", 2)); !slices.Equal(got, ids(recs)) {
			t.Errorf("walking %s(%q, ..., 2) after a restart = %v; want %v", list, "alice", got, ids(recs))
		}
		// A cursor handed out before the restart still continues the listing.
		rest, _, err := st.List(ctx, "alice", cursor, 10)
		if err != nil || !slices.Equal(ids(rest), ids(recs[2:])) {
			t.Errorf("%s(%q, cursor from before the restart, 10) = %v, %v; want %v, nil", list, "alice", ids(rest), err, ids(recs[2:]))
		}
	})
}

// countOf returns how many times v occurs in s.
func countOf(s []string, v string) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// putOrder returns 0..n-1 in an order other than ascending (for n > 2): odd indexes
// descending, then even ones ascending.
func putOrder(n int) []int {
	var order []int
	for i := n - 1; i >= 0; i-- {
		if i%2 == 1 {
			order = append(order, i)
		}
	}
	for i := 0; i < n; i += 2 {
		order = append(order, i)
	}
	return order
}

func strptr(s string) *string { return &s }

func sampleContainer(id string) core.Container {
	return core.Container{
		Image:    "ghcr.io/example/" + id + ":v1.2.3",
		Args:     "python -u handler.py --model " + id,
		Disk:     40,
		Ports:    []string{"8000/http", "22/tcp"},
		Env:      map[string]string{"HF_HOME": "/models", "MODEL_ID": id},
		Registry: strptr("reg-" + id),
	}
}

func sampleEndpoint(id, owner string, created time.Time) core.Endpoint {
	return core.Endpoint{
		ID:         id,
		Owner:      owner,
		Name:       "endpoint " + id,
		Type:       core.TypeQueue,
		TemplateID: "tpl-" + id,
		Container:  sampleContainer(id),
		GPU:        core.GPU{Pools: []string{"h100", "a100"}, Count: 2},
		Workers:    core.Workers{Min: 1, Max: 5, IdleTimeout: 30},
		Scaling:    core.Scaling{Type: core.ScaleQueueDelay, QueueDelay: 2.5},
		DataCenterIDs: []string{
			"EU-RO-1", "US-TX-3",
		},
		NetworkVolumes:      []string{"vol-" + id},
		TimeoutMs:           600_000,
		Flashboot:           core.FlashbootPriority,
		AllowedCudaVersions: []string{"12.4", "12.1"},
		CreatedAt:           created,
		UpdatedAt:           created.Add(90 * time.Minute),
	}
}

func sampleTemplate(id, owner string, created time.Time) core.Template {
	return core.Template{
		ID:                  id,
		Owner:               owner,
		Name:                "template " + id,
		Container:           sampleContainer(id),
		AllowedCudaVersions: []string{"12.4", "11.8"},
		StartSSH:            true,
		StartJupyter:        false,
		IsServerless:        true,
		CreatedAt:           created,
		UpdatedAt:           created.Add(90 * time.Minute),
	}
}

// sameEndpoint reports whether two endpoints are equal, comparing times with Equal.
func sameEndpoint(got, want core.Endpoint) bool {
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) {
		return false
	}
	got.CreatedAt, got.UpdatedAt = want.CreatedAt, want.UpdatedAt
	return reflect.DeepEqual(got, want)
}

// sameTemplate reports whether two templates are equal, comparing times with Equal.
func sameTemplate(got, want core.Template) bool {
	if !got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt) {
		return false
	}
	got.CreatedAt, got.UpdatedAt = want.CreatedAt, want.UpdatedAt
	return reflect.DeepEqual(got, want)
}
