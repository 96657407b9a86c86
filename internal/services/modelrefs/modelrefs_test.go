package modelrefs_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/services/modelrefs"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type fakeStore struct {
	refs    []catalog.ModelVersionRef
	deleted map[int]bool
}

func (f *fakeStore) ListProjects(context.Context) ([]catalog.Project, error) {
	return []catalog.Project{{Name: "a"}, {Name: "b"}}, nil
}

func (f *fakeStore) ReferenceModelVersion(_ context.Context, project, endpoint, model string, version int) error {
	if f.deleted[version] {
		return catalog.ErrNotFound
	}
	r := catalog.ModelVersionRef{Project: project, Endpoint: endpoint, Model: model, Version: version, ReservedAt: t0}
	for i := range f.refs {
		if key(f.refs[i]) == key(r) {
			f.refs[i].ReservedAt = t0
			return nil
		}
	}
	f.refs = append(f.refs, r)
	return nil
}

func key(r catalog.ModelVersionRef) string {
	return fmt.Sprintf("%s\x00%s\x00%s\x00%09d", r.Project, r.Endpoint, r.Model, r.Version)
}

func (f *fakeStore) ModelReferencesBefore(_ context.Context, t time.Time, after catalog.ModelVersionRef, max int) ([]catalog.ModelVersionRef, error) {
	var out []catalog.ModelVersionRef
	slices.SortFunc(f.refs, func(a, b catalog.ModelVersionRef) int { return strings.Compare(key(a), key(b)) })
	for _, r := range f.refs {
		if r.ReservedAt.Before(t) && key(r) > key(after) && len(out) < max {
			out = append(out, r)
		}
	}
	return out, nil
}

func (f *fakeStore) RemoveModelReference(_ context.Context, r catalog.ModelVersionRef, before time.Time) (int64, error) {
	n := len(f.refs)
	f.refs = slices.DeleteFunc(f.refs, func(x catalog.ModelVersionRef) bool { return key(x) == key(r) && x.ReservedAt.Before(before) })
	return int64(n - len(f.refs)), nil
}

type fakeEndpoints map[string]activities.EndpointStatus

func (f fakeEndpoints) Status(_ context.Context, project, name string) (activities.EndpointStatus, error) {
	if name == "unreachable" {
		return activities.EndpointStatus{}, fmt.Errorf("temporal is down")
	}
	st, ok := f[project+"/"+name]
	if !ok {
		return st, endpointclient.ErrNotFound
	}
	return st, nil
}

func (f fakeEndpoints) Names(_ context.Context, project string) ([]string, error) {
	var out []string
	for k := range f {
		if p, name, _ := strings.Cut(k, "/"); p == project {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func serving(versions ...int) activities.EndpointStatus {
	var st activities.EndpointStatus
	for i, v := range versions {
		st.Revisions = append(st.Revisions, inference.Revision{Number: i + 1, Spec: inference.EndpointSpec{
			Model: inference.Model{Ref: "m", Registered: &inference.RegisteredModel{Model: "m", Version: v}}}})
	}
	return st
}

// The sweep keeps what a kept revision serves, what is younger than the
// grace and what an unreachable endpoint holds; it removes reservations no
// revision uses and every reference of an endpoint gone or being deleted,
// page after page.
func TestSweepRemovesWhatNoRevisionServes(t *testing.T) {
	old, fresh := t0.Add(-time.Hour), t0.Add(-time.Minute)
	ref := func(p, e string, v int, at time.Time) catalog.ModelVersionRef {
		return catalog.ModelVersionRef{Project: p, Endpoint: e, Model: "m", Version: v, ReservedAt: at}
	}
	st := &fakeStore{refs: []catalog.ModelVersionRef{
		ref("a", "chat", 1, old),        // revision 1 (kept for rollback)
		ref("a", "chat", 2, old),        // revision 2
		ref("a", "chat", 3, old),        // a refused update's reservation
		ref("a", "chat", 4, fresh),      // an update in flight
		ref("a", "gone", 1, old),        // endpoint deleted
		ref("a", "deleting", 1, old),    // endpoint being deleted
		ref("a", "unreachable", 1, old), // cannot tell
		ref("b", "chat", 3, old),        // another tenant's endpoint serves 3
	}}
	deleting := serving(1)
	deleting.Deleting = true
	eps := fakeEndpoints{"a/chat": serving(1, 2), "a/deleting": deleting, "b/chat": serving(3)}
	sw := modelrefs.New(st, eps, func() time.Time { return t0 }, zap.NewNop(), modelrefs.Options{Grace: 10 * time.Minute, Batch: 2})
	n, err := sw.Sweep(t.Context())
	if err != nil || n != 3 {
		t.Fatalf("sweep = %d, %v; want 3 removed", n, err)
	}
	var left []string
	for _, r := range st.refs {
		left = append(left, fmt.Sprintf("%s/%s@%d", r.Project, r.Endpoint, r.Version))
	}
	if got, want := strings.Join(left, " "), "a/chat@1 a/chat@2 a/chat@4 a/unreachable@1 b/chat@3"; got != want {
		t.Fatalf("left %s, want %s", got, want)
	}
}

// The backfill records every kept revision's version of every endpoint,
// skipping deleted versions and endpoints being deleted.
func TestBackfillRecordsEveryRevision(t *testing.T) {
	st := &fakeStore{deleted: map[int]bool{5: true}}
	deleting := serving(4)
	deleting.Deleting = true
	eps := fakeEndpoints{"a/chat": serving(1, 2, 2), "a/old": serving(5, 3), "a/deleting": deleting, "b/chat": serving(1)}
	sw := modelrefs.New(st, eps, func() time.Time { return t0 }, zap.NewNop(), modelrefs.Options{})
	if err := sw.Backfill(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range st.refs {
		got = append(got, fmt.Sprintf("%s/%s@%d", r.Project, r.Endpoint, r.Version))
	}
	slices.Sort(got)
	if want := "a/chat@1 a/chat@2 a/old@3 b/chat@1"; strings.Join(got, " ") != want {
		t.Fatalf("backfilled %v, want %s", got, want)
	}
}
