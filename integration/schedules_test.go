package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// Schedules over Temporal Schedules, through REST:
//   - bad input is a 422 naming the field (a cron Temporal refuses, an
//     unknown pipeline, an interval under 1s);
//   - every 1s with overlap skip, a 2.5 s run never overlaps the next:
//     starts are skipped and counted, and the runs are listed in REST with
//     the schedule that started them, though the gateway never started
//     them (each workflow writes its own catalogue row);
//   - pause stops it; a backfill of 10 intervals creates 10 runs; trigger
//     starts one now; another project sees nothing; delete removes it.
func TestSchedulesOnRealStack(t *testing.T) {
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("tick", fmt.Sprintf(`
steps:
  - name: work
    container: {command: ["sh", "-c", "echo start >> %[1]s/log; sleep 2.5; echo end >> %[1]s/log"]}
`, dir))
	s.createPipeline("quick", `
steps:
  - name: hello
    container: {command: ["true"]}
`)
	var p gen.Problem
	for _, bad := range []struct {
		body map[string]any
		path string
	}{
		{map[string]any{"name": "bad", "pipeline": "tick", "cron": []string{"61 * * * *"}}, "cron"},
		{map[string]any{"name": "bad", "pipeline": "nope", "every": []string{"1m"}}, "pipeline"},
		{map[string]any{"name": "bad", "pipeline": "tick", "every": []string{"500ms"}}, "every[0]"},
		{map[string]any{"name": "bad", "pipeline": "tick"}, "cron"},
	} {
		p = gen.Problem{}
		require.Equal(t, 422, s.do("POST", s.path("/schedules"), bad.body, &p), "%v", bad.body)
		require.NotNil(t, p.Errors)
		assert.Equal(t, bad.path, (*p.Errors)[0].Path, "%s", deref2(p.Detail))
	}

	var sc gen.Schedule
	require.Equal(t, 201, s.do("POST", s.path("/schedules"), map[string]any{
		"name": "tick", "pipeline": "tick", "every": []string{"1s"}, "overlap": "skip"}, &sc))
	assert.Equal(t, 1, sc.Version)
	assert.Equal(t, gen.Skip, sc.Overlap)
	require.Equal(t, 409, s.do("POST", s.path("/schedules"), map[string]any{"name": "tick", "pipeline": "tick", "every": []string{"1s"}}, nil))

	// Let it run about three runs' worth, then pause.
	time.Sleep(8 * time.Second)
	require.Equal(t, 200, s.do("POST", s.path("/schedules/tick/pause"), map[string]any{"note": "maintenance"}, &sc))
	assert.True(t, sc.Paused)
	assert.Equal(t, "maintenance", deref2(sc.Note))
	assert.Positive(t, sc.SkippedOverlap, "starts were skipped while a run was running")
	require.NotEmpty(t, sc.RecentRuns)
	// The last run finishes; the log then alternates start/end: never two
	// runs at once.
	time.Sleep(3 * time.Second)
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	require.NoError(t, err)
	lines := strings.Fields(string(b))
	require.GreaterOrEqual(t, len(lines), 4, "at least two runs: %q", lines)
	for i, l := range lines {
		want := map[bool]string{true: "start", false: "end"}[i%2 == 0]
		require.Equal(t, want, l, "runs overlapped: %q", lines)
	}
	// A scheduled run is an ordinary run in REST.
	first := sc.RecentRuns[0].RunId
	r := s.waitTerminal(first, 30*time.Second)
	assert.Equal(t, "tick", r.Status.ScheduleID)
	assert.Equal(t, "tick", r.Status.Pipeline)

	// Backfill 10 intervals of a paused every-minute schedule (a backfill
	// and a trigger are asked for explicitly: pause does not stop them).
	require.Equal(t, 201, s.do("POST", s.path("/schedules"), map[string]any{
		"name": "daily", "pipeline": "quick", "every": []string{"1m"}, "paused": true}, nil))
	start := time.Now().UTC().Truncate(time.Minute).Add(-10*time.Minute + 30*time.Second)
	require.Equal(t, 200, s.do("POST", s.path("/schedules/daily/backfill"), map[string]any{
		"start": start.Format(time.RFC3339), "end": start.Add(10 * time.Minute).Format(time.RFC3339)}, nil))
	waitRuns := func(n int) []string {
		var ids []string
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(300 * time.Millisecond) {
			var list struct {
				Runs []struct {
					ID    string `json:"id"`
					State string `json:"state"`
				} `json:"runs"`
			}
			require.Equal(t, 200, s.do("GET", s.path("/runs?pipeline=quick&pageSize=100"), nil, &list))
			ids = ids[:0]
			for _, r := range list.Runs {
				if r.State == "SUCCEEDED" {
					ids = append(ids, r.ID)
				}
			}
			if len(ids) >= n {
				return ids
			}
		}
		t.Fatalf("%d runs of the backfill succeeded, want %d", len(ids), n)
		return nil
	}
	ids := waitRuns(10)
	assert.Len(t, ids, 10, "a backfill of 10 intervals creates 10 runs")
	require.Equal(t, 200, s.do("POST", s.path("/schedules/daily/trigger"), nil, nil))
	waitRuns(11)

	var list gen.ScheduleList
	require.Equal(t, 200, s.do("GET", s.path("/schedules"), nil, &list))
	require.Len(t, list.Items, 2)
	assert.Equal(t, "daily", list.Items[0].Name)

	other := s.asProject("team-b")
	require.Equal(t, 404, other.do("GET", other.path("/schedules/tick"), nil, nil))
	var otherList gen.ScheduleList
	require.Equal(t, 200, other.do("GET", other.path("/schedules"), nil, &otherList))
	assert.Empty(t, otherList.Items)
	require.Equal(t, 404, s.do("GET", "/v1/projects/team-b/schedules/tick", nil, nil), "a project's token cannot reach another's schedules")

	require.Equal(t, 204, s.do("DELETE", s.path("/schedules/tick"), nil, nil))
	require.Equal(t, 204, s.do("DELETE", s.path("/schedules/daily"), nil, nil))
	require.Equal(t, 404, s.do("GET", s.path("/schedules/tick"), nil, nil))
}

func deref2(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
