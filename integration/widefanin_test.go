package integration

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// wideFanInPipeline: a wide forEach of 1,100 items each writes a tiny
// artifact (a file holding its index; every hundredth item a directory of
// two files), and a cached step reads them all as one directory, each
// item's under its index, and checks it sees every one.
const wideFanInPipeline = `
steps:
  - name: shard
    forEach: {items: "0..1099", parallelism: 100}
    container:
      command: [sh, -c, 'if [ {{ item % 100 }} -eq 0 ]; then mkdir "$ATELIER_ARTIFACTS/part" && echo {{ item }} > "$ATELIER_ARTIFACTS/part/v" && echo x > "$ATELIER_ARTIFACTS/part/extra"; else echo {{ item }} > "$ATELIER_ARTIFACTS/part"; fi']
      artifacts:
        outputs: [{name: part, type: dataset}]
  - name: merge
    cache: {}
    container:
      command: [sh, -c, 'cd "$ATELIER_INPUTS/parts" && test "$(cat 7)" = 7 && test "$(cat 1099)" = 1099 && test "$(cat 300/v)" = 300 && printf "{\"entries\": %s, \"files\": %s, \"sum\": %s}" $(ls | wc -l) $(find . -type f | wc -l) $(find . -type f ! -name extra -exec cat {} + | awk "{s+=\$1} END {print s}") > "$ATELIER_OUTPUTS"']
      artifacts:
        inputs: [{name: parts, from: shard.part}]
`

// A step reads a wide forEach's artifact (1,100 items, on the real stack:
// Temporal, Postgres, the local runtime, a directory artifact store): it
// gets one directory holding each item's artifact under its index, the
// run's history carries one reference (the directory's manifest, made
// by atelier.foreach.fan-in from the items' references in Postgres), the
// lineage records every item's artifact, the directory and its use, and
// a second run whose items wrote the same bytes finds the reading step in
// the cache (its key holds the directory's digest). With
// ATELIER_RECORD_HISTORIES=1 it records v14-wide-fan-in.
func TestWideFanInOnTheRealStack(t *testing.T) {
	if testing.Short() {
		t.Skip("2 × 1,100 local processes")
	}
	s := newStack(t, stackOptions{concurrency: 100})
	s.createPipeline("wide-fan-in", wideFanInPipeline)
	start := time.Now()
	id := s.start("wide-fan-in", nil)
	r := s.waitTerminal(id, 5*time.Minute)
	t.Logf("1,100 items and their fan-in in %s", time.Since(start).Round(time.Millisecond))
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	shard := stepByName(r, "shard")
	require.NotNil(t, shard.Wide, "1,100 items run wide")
	merge := stepByName(r, "merge")
	require.Equal(t, gen.StepStateSUCCEEDED, merge.State, val(merge.Error))
	assert.Equal(t, map[string]any{"entries": 1100.0, "files": 1111.0, "sum": 604450.0}, merge.Outputs,
		"every item's artifact under its index: 1,089 files and 11 directories of 2 files")
	ins := val(merge.Inputs)
	require.Len(t, ins, 1, "one reference, not 1,100")
	assert.Equal(t, "parts", ins[0].Name)
	assert.Equal(t, "shard.part", val(ins[0].From))
	assert.Equal(t, 1111, val(ins[0].Files))
	assert.Equal(t, "shard", ins[0].Producer.Step)
	assert.Nil(t, ins[0].Producer.Item)

	var ra gen.RunArtifacts
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/runs/%s/artifacts", id), nil)
		return code == 200 && json.Unmarshal(body, &ra) == nil && len(ra.Produced) == 1101 && len(ra.Consumed) == 1
	}, 20*time.Second, 200*time.Millisecond, "1,100 items' artifacts and the directory written, the directory read: %d, %d", len(ra.Produced), len(ra.Consumed))
	assert.Equal(t, "parts", ra.Consumed[0].Use.Input)
	assert.Equal(t, ins[0].Id, ra.Consumed[0].Artifact.Id)
	code, body := s.raw("GET", s.path("/artifacts/%s", ins[0].Id), nil)
	require.Equal(t, 200, code, "%s", body)
	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		time.Sleep(500 * time.Millisecond)
		recordHistory(t, s, "v14-wide-fan-in", id)
	}

	// The same items again: the same directory, so the reading step is a
	// cache hit.
	again := s.waitTerminal(s.start("wide-fan-in", nil), 5*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, again.State, "%s", val(again.Status.Error))
	m2 := stepByName(again, "merge")
	assert.Equal(t, gen.StepStateCACHED, m2.State)
	assert.Equal(t, ins[0].Digest, val(m2.Inputs)[0].Digest)

	// Another project sees none of it.
	other := s.asProject("other-wide-fan-in")
	code, _ = other.raw("GET", other.path("/artifacts/%s", ins[0].Id), nil)
	assert.Equal(t, 404, code)
}

// A child pipeline exports a forEach step's artifact, on the real stack:
// its run assembles one directory of each item's artifact under its
// index (atelier.foreach.fan-in), the parent's pipeline step carries
// that reference, and the parent's step reads it; lineage lists the
// directory as the child's forEach step's artifact and the parent's step
// as its consumer. With ATELIER_RECORD_HISTORIES=1 it records
// v14-export-fan-in-child (the child run, which asks the fan-in).
func TestChildExportsAForEachOnTheRealStack(t *testing.T) {
	s := newStack(t)
	s.createPipeline("sweeper", `
steps:
  - name: sweep
    forEach: {items: [0, 1, 2]}
    container:
      command: [sh, -c, 'echo {{ item }} > "$ATELIER_ARTIFACTS/part"']
      artifacts:
        outputs: [{name: part}]
artifacts:
  - {name: parts, from: sweep.part}
`)
	s.createPipeline("sweep-reader", `
steps:
  - {name: sweep, kind: pipeline, pipeline: {name: sweeper}}
  - name: read
    container:
      command: [sh, -c, 'printf "{\"sum\": %s}" $(cat "$ATELIER_INPUTS/all/0" "$ATELIER_INPUTS/all/1" "$ATELIER_INPUTS/all/2" | awk "{s+=\$1} END {print s}") > "$ATELIER_OUTPUTS"']
      artifacts:
        inputs: [{name: all, from: sweep.parts}]
`)
	id := s.start("sweep-reader", nil)
	r := s.waitTerminal(id, 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	assert.Equal(t, map[string]any{"sum": 3.0}, stepByName(r, "read").Outputs)
	sweep := stepByName(r, "sweep")
	require.Len(t, val(sweep.Artifacts), 1)
	dir := val(sweep.Artifacts)[0]
	assert.Equal(t, "parts", dir.Name)
	assert.Equal(t, 3, val(dir.Files))
	childID := val(sweep.Attempts)[0].ChildRun.RunId
	assert.Equal(t, childID, dir.Producer.Run)
	assert.Equal(t, "sweep", dir.Producer.Step)

	var l gen.ArtifactLineage
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/artifacts/%s", dir.Id), nil)
		return code == 200 && json.Unmarshal(body, &l) == nil && len(l.Consumers) == 1
	}, 20*time.Second, 200*time.Millisecond, "the directory is in lineage, read by the parent's step")
	assert.Equal(t, id, l.Consumers[0].Run)
	assert.Equal(t, "read", l.Consumers[0].Step)
	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		time.Sleep(500 * time.Millisecond)
		recordHistory(t, s, "v14-export-fan-in-child", childID)
	}
}
