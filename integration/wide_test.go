package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// listItems pages every item of a step in one state through REST.
func (s *stack) listItems(c *gen.ClientWithResponses, run, step string, state gen.StepState, pageSize int) ([]gen.StepItem, gen.StepItemPage) {
	s.t.Helper()
	var all []gen.StepItem
	var last gen.StepItemPage
	params := &gen.ListStepItemsParams{PageSize: &pageSize}
	if state != "" {
		params.State = &state
	}
	for pages := 0; ; pages++ {
		require.Less(s.t, pages, 10_000, "pagination does not end")
		r, err := c.ListStepItemsWithResponse(context.Background(), s.project, run, step, params)
		require.NoError(s.t, err)
		require.Equal(s.t, 200, r.StatusCode(), "%s", r.Body)
		last = *r.JSON200
		all = append(all, last.Items...)
		if last.NextPageToken == nil {
			return all, last
		}
		params.PageToken = last.NextPageToken
	}
}

// A 3,000-item forEach of a real local step runs wide (batch workflows):
// 1% of its items fail and the failure policy tolerates them; the items
// are paged by state through REST; a reducer sums every item's output
// through a template rendered over Postgres; each item's log is served;
// another project cannot see the items.
func TestWideForEachOnTheRealStack(t *testing.T) {
	if testing.Short() {
		t.Skip("3,000 local processes")
	}
	s := newStack(t, stackOptions{concurrency: 200})
	s.createPipeline("wide", `
steps:
  - name: square
    forEach:
      items: "0..2999"
      parallelism: 200
      failurePolicy: {mode: continue, maxFailedPercent: 1}
    container:
      command: ["sh", "-c", "if [ {{ item % 100 }} -eq 7 ]; then echo boom >&2; exit 4; fi; echo '{\"v\": {{ item * item }}}' > $ATELIER_OUTPUTS"]
  - name: total
    container:
      command: ["sh", "-c", "echo '{\"sum\": {{ sum(map(filter(steps.square.outputs, # != nil), .v)) }}, \"n\": {{ len(steps.square.outputs) }}}' > $ATELIER_OUTPUTS"]
`)
	start := time.Now()
	id := s.start("wide", nil)
	r := s.waitTerminal(id, 5*time.Minute)
	t.Logf("3,000 items in %s", time.Since(start).Round(time.Millisecond))
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))

	sq := stepByName(r, "square")
	require.NotNil(t, sq.Wide, "a 3,000-item forEach runs wide")
	assert.Empty(t, sq.Items)
	assert.Equal(t, gen.ItemCounts{Succeeded: 2970, Failed: 30}, sq.Wide.Counts)
	assert.Contains(t, val(sq.Message), "30 of 3000 items failed (tolerated: at most 1%)")
	require.NotEmpty(t, val(sq.Wide.Failures))
	assert.Equal(t, 7, (*sq.Wide.Failures)[0].Index)

	var want int64
	for k := int64(0); k < 3000; k++ {
		if k%100 != 7 {
			want += k * k
		}
	}
	total := stepByName(r, "total")
	require.Equal(t, gen.StepStateSUCCEEDED, total.State, val(total.Error))
	assert.Equal(t, map[string]any{"sum": float64(want), "n": 3000.0}, total.Outputs)

	// Paging through REST with the generated client.
	c := s.client()
	failed, page := s.listItems(c, id, "square", gen.StepStateFAILED, 7)
	require.Len(t, failed, 30)
	for k, it := range failed {
		assert.Equal(t, 7+100*k, it.Index, "in index order, each once")
		assert.Equal(t, gen.StepStateFAILED, it.State)
		require.NotNil(t, it.Attempts)
		require.Len(t, *it.Attempts, 1)
		assert.Equal(t, 4, *(*it.Attempts)[0].ExitCode)
	}
	require.NotNil(t, page.Counts)
	assert.Equal(t, 2970, page.Counts.Succeeded)
	assert.Equal(t, 3000, *page.Total)
	ok, _ := s.listItems(c, id, "square", gen.StepStateSUCCEEDED, 1000)
	require.Len(t, ok, 2970)
	assert.Equal(t, 8, ok[7].Index, "item 7 failed")
	assert.Equal(t, map[string]any{"v": 64.0}, ok[7].Outputs)
	all, _ := s.listItems(c, id, "square", "", 1000)
	require.Len(t, all, 3000)

	// Each item's log, by the URL its attempt carries.
	logURL := (*failed[0].Attempts)[0].LogUrl
	require.NotNil(t, logURL)
	code, log := s.raw("GET", *logURL, nil) // a link: no client operation follows one
	require.Equal(t, 200, code, "%s", log)
	assert.Contains(t, string(log), "boom")

	// A token of another state filter is refused; another tenant sees nothing.
	bad := "U1VDQ0VFREVEOjU"
	st := gen.StepStateFAILED
	resp, err := c.ListStepItemsWithResponse(context.Background(), s.project, id, "square", &gen.ListStepItemsParams{State: &st, PageToken: &bad})
	require.NoError(t, err)
	assert.Equal(t, 400, resp.StatusCode(), "%s", resp.Body)
	other := s.asProject("team-b")
	resp, err = other.client().ListStepItemsWithResponse(context.Background(), other.project, id, "square", nil)
	require.NoError(t, err)
	assert.Equal(t, 404, resp.StatusCode())
	resp, err = other.client().ListStepItemsWithResponse(context.Background(), s.project, id, "square", nil)
	require.NoError(t, err)
	assert.Contains(t, []int{403, 404}, resp.StatusCode())
}

// Cancelling a wide run reaches every batch and every running item: the
// run ends CANCELLED and no step process is left running.
func TestWideForEachCancel(t *testing.T) {
	if testing.Short() {
		t.Skip("wide fan-out")
	}
	s := newStack(t, stackOptions{concurrency: 200})
	dir := stepScratchDir(t)
	s.createPipeline("wide-block", fmt.Sprintf(`
steps:
  - name: fan
    forEach: {items: "0..2999", parallelism: 100}
    container:
      command: ["sh", "-c", "touch %s/started-{{ item }}; exec sleep 600"]
`, dir))
	id := s.start("wide-block", nil)
	// Wait until the window is full.
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		return len(m) >= 100
	}, 2*time.Minute, 200*time.Millisecond)
	r := s.getRun(id)
	require.NotNil(t, stepByName(r, "fan").Wide)

	s.cancel(id, "enough")
	r = s.waitTerminal(id, 2*time.Minute)
	assert.Equal(t, gen.RunStateCANCELLED, r.State)
	fan := stepByName(r, "fan")
	assert.Equal(t, gen.StepStateCANCELLED, fan.State)
	assert.Equal(t, 100, fan.Wide.Counts.Cancelled)
	assert.Equal(t, 2900, fan.Wide.Counts.NotRun)
	started, _ := filepath.Glob(filepath.Join(dir, "started-*"))
	assert.Len(t, started, 100, "no item starts after the cancel")
	// Every step process is gone once the run says CANCELLED.
	out, _ := exec.Command("pgrep", "-f", "sleep 600").Output()
	assert.Empty(t, strings.TrimSpace(string(out)), "step processes still running")
	cancelled, _ := s.listItems(s.client(), id, "fan", gen.StepStateCANCELLED, 1000)
	assert.Len(t, cancelled, 100)
	_ = os.RemoveAll(dir)
}

// Kill -9 the worker while a wide forEach runs, start another: the run
// completes, every item is recorded exactly once as SUCCEEDED, only the
// items that were running when the worker died run again, and the reducer
// sees every output.
func TestWideForEachSurvivesWorkerKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("wide fan-out")
	}
	s := newStack(t, stackOptions{noWorker: true})
	dir := stepScratchDir(t)
	s.createPipeline("wide-crash", fmt.Sprintf(`
steps:
  - name: fan
    forEach: {items: "0..1499", parallelism: 100}
    container:
      command: ["sh", "-c", "echo {{ item }} >> %s/ran; sleep 0.3; echo '{\"k\": {{ item }}}' > $ATELIER_OUTPUTS"]
  - name: total
    container: {command: ["sh", "-c", "echo '{\"sum\": {{ sum(map(steps.fan.outputs, .k)) }}}' > $ATELIER_OUTPUTS"]}
`, dir))
	id := s.start("wide-crash", nil)
	w := s.startWorkerProcess(t, "worker-1.log", "ATELIER_WORKER_CONCURRENCY=200")
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "ran"))
		return strings.Count(string(b), "\n") >= 300
	}, 3*time.Minute, 100*time.Millisecond)
	require.NoError(t, w.Process.Signal(syscall.SIGKILL))
	_ = w.Wait()
	s.startWorkerProcess(t, "worker-2.log", "ATELIER_WORKER_CONCURRENCY=200")

	r := s.waitTerminal(id, 5*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	fan := stepByName(r, "fan")
	assert.Equal(t, gen.ItemCounts{Succeeded: 1500}, fan.Wide.Counts)
	assert.Equal(t, map[string]any{"sum": float64(1499 * 1500 / 2)}, stepByName(r, "total").Outputs)
	all, _ := s.listItems(s.client(), id, "fan", "", 1000)
	require.Len(t, all, 1500)
	for k, it := range all {
		require.Equal(t, k, it.Index)
		require.Equal(t, gen.StepStateSUCCEEDED, it.State)
	}
	b, err := os.ReadFile(filepath.Join(dir, "ran"))
	require.NoError(t, err)
	runs := strings.Count(string(b), "\n")
	assert.GreaterOrEqual(t, runs, 1500)
	assert.LessOrEqual(t, runs, 1500+100, "only the items in flight at the kill run again")
	t.Logf("%d item processes for 1,500 items", runs)
}

// Retry from failure of a wide step: the retry's batches take the items
// that succeeded from Postgres (CACHED, not run again) and run the rest.
func TestWideForEachRetryReusesSucceededItems(t *testing.T) {
	if testing.Short() {
		t.Skip("wide fan-out")
	}
	s := newStack(t, stackOptions{concurrency: 200})
	dir := stepScratchDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken"), nil, 0o666))
	s.createPipeline("wide-retry", fmt.Sprintf(`
steps:
  - name: fan
    forEach: {items: "0..1199", parallelism: 200, failurePolicy: {mode: continue}}
    container:
      command: ["sh", "-c", "echo {{ item }} >> %[1]s/ran; if [ {{ item }} -ge 1190 ] && [ -e %[1]s/broken ]; then exit 1; fi; echo '{\"k\": {{ item }}}' > $ATELIER_OUTPUTS"]
  - name: total
    container: {command: ["sh", "-c", "echo '{\"sum\": {{ sum(map(steps.fan.outputs, .k)) }}}' > $ATELIER_OUTPUTS"]}
`, dir))
	id := s.start("wide-retry", nil)
	r := s.waitTerminal(id, 5*time.Minute)
	require.Equal(t, gen.RunStateFAILED, r.State)
	assert.Equal(t, gen.ItemCounts{Succeeded: 1190, Failed: 10}, stepByName(r, "fan").Wide.Counts)

	// The failed items, as a user lists them with the CLI.
	config := filepath.Join(t.TempDir(), "config.yaml")
	cli := func(args ...string) cliResult { return atelierCLI(t, config, args...) }
	require.Equal(t, 0, cli("login", s.url, "--token", s.token, "--project", s.project).code)
	out := cli("items", id, "fan", "--state", "failed")
	require.Equal(t, 0, out.code, out.stderr)
	assert.Contains(t, out.stderr, "1200 items: 1190 succeeded, 10 failed")
	lines := strings.Split(strings.TrimSpace(out.stdout), "\n")
	require.Len(t, lines, 11, "a header and the 10 failed items:\n%s", out.stdout)
	assert.Regexp(t, `^1190\s+FAILED\s+1\s+1\s+1190\s+`, lines[1])

	require.NoError(t, os.Remove(filepath.Join(dir, "broken")))
	require.NoError(t, os.Remove(filepath.Join(dir, "ran")))
	retry := s.retry(id, gen.RetryRunRequest{})
	r = s.waitTerminal(retry, 5*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	assert.Equal(t, gen.ItemCounts{Succeeded: 10, Cached: 1190}, stepByName(r, "fan").Wide.Counts)
	assert.Equal(t, map[string]any{"sum": float64(1199 * 1200 / 2)}, stepByName(r, "total").Outputs)
	b, err := os.ReadFile(filepath.Join(dir, "ran"))
	require.NoError(t, err)
	assert.Equal(t, 10, strings.Count(string(b), "\n"), "only the failed items ran again")
	cached, _ := s.listItems(s.client(), retry, "fan", gen.StepStateCACHED, 1000)
	require.Len(t, cached, 1190)
	require.NotNil(t, cached[0].Message)
	assert.Equal(t, "reused from run "+id, *cached[0].Message)
}

// wideTemplatesPipeline reads a wide step's outputs beyond a reducer
// (workflows/widetemplates.go): a wide step and a small forEach whose
// items read them by index, and an approval whose message sums them.
const wideTemplatesPipeline = `
steps:
  - name: prep
    forEach: {items: "0..1099", parallelism: 100}
    container: {command: ["sh", "-c", "echo '{\"v\": {{ item * 2 }}}' > $ATELIER_OUTPUTS"]}
  - name: twice
    forEach: {items: "0..1099", parallelism: 100}
    container: {command: ["sh", "-c", "echo '{\"w\": {{ steps.prep.outputs[item].v + item }}}' > $ATELIER_OUTPUTS"]}
  - name: pick
    forEach: {items: "[0, 7, 1099]"}
    container: {command: ["sh", "-c", "echo '{\"v\": {{ steps.prep.outputs[item].v }}}' > $ATELIER_OUTPUTS"]}
  - name: gate
    kind: approval
    dependsOn: [twice, pick]
    approval: {message: "ship {{ len(steps.twice.outputs) }} items summing {{ sum(map(steps.twice.outputs, .w)) }}?"}
  - name: total
    dependsOn: [gate]
    container: {command: ["sh", "-c", "echo '{\"sum\": {{ sum(map(steps.twice.outputs, .w)) }}}' > $ATELIER_OUTPUTS"]}
`

// runWideTemplates runs wideTemplatesPipeline, approves its gate through
// the generated client once it asks, and returns the run's ID and end.
func runWideTemplates(t *testing.T, s *stack) (string, gen.Run) {
	t.Helper()
	s.createPipeline("wide-templates", wideTemplatesPipeline)
	id := s.start("wide-templates", nil)
	r := s.waitRun(id, 5*time.Minute, "gate waiting", func(r gen.Run) bool {
		return terminal(r.State) || (r.Status != nil && stepByName(r, "gate").State == gen.StepStateWAITINGFORAPPROVAL)
	})
	gate := stepByName(r, "gate")
	require.Equal(t, gen.StepStateWAITINGFORAPPROVAL, gate.State, "%s %s", r.State, val(r.Status.Error))
	require.NotNil(t, gate.Approval)
	assert.Equal(t, "ship 1100 items summing 1813350?", val(gate.Approval.Message))
	comment := "sums match"
	res, err := s.client().ApproveStepWithResponse(context.Background(), s.project, id, "gate", gen.ApprovalDecisionRequest{Comment: &comment})
	require.NoError(t, err)
	require.Equal(t, 200, res.StatusCode(), "%s", res.Body)
	return id, s.waitTerminal(id, 2*time.Minute)
}

// Templates of a wide step, of a small forEach and of an approval read a
// wide step's outputs on the real stack: items rendered in chunks by
// atelier.foreach.render-items over Postgres, the approval's message by
// atelier.step.render.
func TestWideTemplatesOnTheRealStack(t *testing.T) {
	if testing.Short() {
		t.Skip("2,200 local processes")
	}
	s := newStack(t, stackOptions{concurrency: 100})
	id, r := runWideTemplates(t, s)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	twice := stepByName(r, "twice")
	require.NotNil(t, twice.Wide)
	assert.Equal(t, gen.ItemCounts{Succeeded: 1100}, twice.Wide.Counts)
	items, _ := s.listItems(s.client(), id, "twice", gen.StepStateSUCCEEDED, 1000)
	require.Len(t, items, 1100)
	for _, it := range items {
		require.Equal(t, map[string]any{"w": float64(3 * it.Index)}, it.Outputs, "item %d", it.Index)
	}
	pick := stepByName(r, "pick")
	require.Equal(t, gen.StepStateSUCCEEDED, pick.State, val(pick.Error))
	assert.Equal(t, []any{map[string]any{"v": 0.0}, map[string]any{"v": 14.0}, map[string]any{"v": 2198.0}}, pick.Outputs)
	assert.Equal(t, map[string]any{"sum": 1813350.0}, stepByName(r, "total").Outputs)
}

// wideExitPipeline's outputs and exit handlers read a wide step's outputs
// (workflows/wideexit.go): a reducer and a count as outputs, an exit
// handler whose when and command read the list, and one whose forEach
// list is computed from it.
const wideExitPipeline = `
steps:
  - name: square
    forEach: {items: "0..1099", parallelism: 100}
    container: {command: ["sh", "-c", "echo '{\"v\": {{ item * item }}}' > $ATELIER_OUTPUTS"]}
outputs:
  total: "{{ sum(map(steps.square.outputs, .v)) }}"
  count: "{{ len(steps.square.outputs) }}"
onExit:
  - name: report
    when: "len(steps.square.outputs) == 1100"
    container: {command: ["sh", "-c", "echo '{\"state\": \"{{ run.state }}\", \"last\": {{ steps.square.outputs[1099].v }}}' > $ATELIER_OUTPUTS"]}
  - name: small
    forEach: {items: "filter(map(steps.square.outputs, .v), # < 10)"}
    container: {command: ["sh", "-c", "echo '{\"v\": {{ item }}}' > $ATELIER_OUTPUTS"]}
`

// runWideExit runs wideExitPipeline and returns the run's ID and end.
func runWideExit(t *testing.T, s *stack) (string, gen.Run) {
	t.Helper()
	s.createPipeline("wide-exit", wideExitPipeline)
	id := s.start("wide-exit", nil)
	return id, s.waitTerminal(id, 5*time.Minute)
}

// The pipeline's outputs and its exit handlers read a wide step's outputs
// on the real stack: evaluated by atelier.step.render over Postgres, so
// they see the 1,100 outputs and not the reference that stands for them
// in the workflow.
func TestWideExitAndOutputsOnTheRealStack(t *testing.T) {
	if testing.Short() {
		t.Skip("1,100 local processes")
	}
	s := newStack(t, stackOptions{concurrency: 100})
	_, r := runWideExit(t, s)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	var total float64
	for k := 0; k < 1100; k++ {
		total += float64(k * k)
	}
	assert.Equal(t, map[string]any{"total": total, "count": 1100.0}, r.Status.Result)
	report := stepByName(r, "report")
	require.Equal(t, gen.StepStateSUCCEEDED, report.State, "%s", val(report.Error))
	assert.Equal(t, map[string]any{"state": "SUCCEEDED", "last": float64(1099 * 1099)}, report.Outputs)
	small := stepByName(r, "small")
	require.Equal(t, gen.StepStateSUCCEEDED, small.State, "%s", val(small.Error))
	assert.Equal(t, []any{map[string]any{"v": 0.0}, map[string]any{"v": 1.0}, map[string]any{"v": 4.0}, map[string]any{"v": 9.0}}, small.Outputs)
}

// wideListPipeline's second wide step iterates over a list computed from
// the first one's outputs that is too large to enter a workflow (1,100
// strings of 300 bytes: over 256 KiB): each batch fetches its own items.
var wideListPipeline = fmt.Sprintf(`
steps:
  - name: prep
    forEach: {items: "0..1099", parallelism: 100}
    container: {command: ["sh", "-c", "echo '{\"s\": \"%s-{{ item }}\"}' > $ATELIER_OUTPUTS"]}
  - name: each
    forEach: {items: "map(steps.prep.outputs, .s)", parallelism: 100}
    container: {command: ["sh", "-c", "echo '{\"n\": '$(printf %%s '{{ item }}' | wc -c)'}' > $ATELIER_OUTPUTS"]}
`, strings.Repeat("x", 300))

// runWideList runs wideListPipeline and returns the run's ID and end.
func runWideList(t *testing.T, s *stack) (string, gen.Run) {
	t.Helper()
	s.createPipeline("wide-list", wideListPipeline)
	id := s.start("wide-list", nil)
	return id, s.waitTerminal(id, 5*time.Minute)
}

// A wide forEach over a list computed from a wide step's outputs, too
// large for the pipeline's history, runs on the real stack: its batches
// evaluate the list over Postgres, and every item sees its own value.
func TestWideListOverWideOutputsOnTheRealStack(t *testing.T) {
	if testing.Short() {
		t.Skip("2,200 local processes")
	}
	s := newStack(t, stackOptions{concurrency: 100})
	id, r := runWideList(t, s)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	each := stepByName(r, "each")
	require.NotNil(t, each.Wide)
	assert.Equal(t, gen.ItemCounts{Succeeded: 1100}, each.Wide.Counts)
	items, _ := s.listItems(s.client(), id, "each", gen.StepStateSUCCEEDED, 1000)
	require.Len(t, items, 1100)
	for _, it := range items {
		k := it.Index
		want := fmt.Sprintf("%s-%d", strings.Repeat("x", 300), k)
		require.Equal(t, want, it.Item, "item %d", k)
		require.Equal(t, map[string]any{"n": float64(len(want))}, it.Outputs, "item %d", k)
	}
}
