package store_test

import (
	"fmt"
	"testing"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// ListModels carries each model's aliases (alias -> version), read with
// the list; a model without aliases has an empty map, and another
// project's aliases stay there.
func TestListModelsCarriesAliases(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	register := func(project, model string, n int) {
		t.Helper()
		for i := 1; i <= n; i++ {
			id := fmt.Sprintf("%s-%s-%d", project, model, i)
			a := runstate.Artifact{ID: id, Name: "model", Type: "model", Digest: "sha256:" + id, Size: 1,
				Producer: runstate.ArtifactProducer{Run: "run-" + id, Step: "train", Attempt: 1}}
			if _, _, err := s.RegisterModelVersion(ctx, catalog.NewModelVersion{Project: project, Model: model, Artifact: a, Actor: "ci"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	alias := func(project, model, alias string, version int) {
		t.Helper()
		if _, err := s.SetModelAlias(ctx, project, model, alias, version, "ci"); err != nil {
			t.Fatal(err)
		}
	}
	register("team-a", "sentiment", 3)
	register("team-a", "fraud", 1)
	register("team-b", "sentiment", 2)
	if _, err := s.CreateModel(ctx, "team-a", "empty", "no versions yet", "ci"); err != nil {
		t.Fatal(err)
	}
	alias("team-a", "sentiment", "champion", 2)
	alias("team-a", "sentiment", "candidate", 3)
	alias("team-a", "fraud", "champion", 1)
	alias("team-b", "sentiment", "champion", 1)
	alias("team-b", "sentiment", "shadow", 2)

	ms, err := s.ListModels(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]map[string]int{}
	latest := map[string]int{}
	for _, m := range ms {
		got[m.Name], latest[m.Name] = m.Aliases, m.Latest
	}
	want := map[string]map[string]int{
		"empty":     {},
		"fraud":     {"champion": 1},
		"sentiment": {"candidate": 3, "champion": 2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("aliases %v, want %v", got, want)
	}
	if got["empty"] == nil {
		t.Error("a model without aliases has a nil map, want an empty one")
	}
	if latest["sentiment"] != 3 || latest["fraud"] != 1 || latest["empty"] != 0 {
		t.Errorf("latest versions %v", latest)
	}

	// The list agrees with GetModel, which reads one model's aliases.
	one, err := s.GetModel(ctx, "team-a", "sentiment")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(one.Aliases) != fmt.Sprint(got["sentiment"]) {
		t.Errorf("GetModel aliases %v, list %v", one.Aliases, got["sentiment"])
	}

	// A removed alias leaves the list.
	if err := s.DeleteModelAlias(ctx, "team-a", "sentiment", "candidate", "ci"); err != nil {
		t.Fatal(err)
	}
	ms, err = s.ListModels(ctx, "team-a")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Name == "sentiment" && fmt.Sprint(m.Aliases) != fmt.Sprint(map[string]int{"champion": 2}) {
			t.Errorf("after removing candidate: %v", m.Aliases)
		}
	}
}
