package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/activities"

	enumspb "go.temporal.io/api/enums/v1"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/examples/gopipeline"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// TestRecordHistories refreshes the workflow histories that
// workflows/replay_test.go replays in every CI run. Run it deliberately when
// a workflow change is meant to be compatible, never to paper over a replay
// failure (that needs a workflow.GetVersion guard):
//
//	ATELIER_RECORD_HISTORIES=1 go test ./integration -run TestRecordHistories
func TestRecordHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t)
	dir := stepScratchDir(t)
	s.createPipeline("train-evaluate", string(readExample(t)))
	s.createPipeline("retry-fail", `
steps:
  - name: flaky
    retries: {limit: 1, backoff: 1s}
    container: {command: ["sh", "-c", "exit 3"]}
  - name: never
    dependsOn: [flaky]
    container: {command: ["true"]}
`)
	s.createPipeline("blocking", blockingPipeline(dir))

	record := func(name, id string) { recordHistory(t, s, name, id) }

	ok := s.start("train-evaluate", nil)
	failed := s.start("retry-fail", nil)
	goRun := s.startRun(gen.CreateRunRequest{Workflow: ptrTo(gopipeline.Name), Input: goInput(t, gopipeline.Input{Dataset: "iris", LearningRates: []float64{0.01, 0.1}, Threshold: 0.5})})
	cancelled := s.start("blocking", nil)
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)
	s.cancel(cancelled, "recording")
	require.NoError(t, os.Remove(filepath.Join(dir, "pid")))
	temporalCancelled := s.start("blocking", nil)
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)
	require.NoError(t, s.temporal.CancelWorkflow(context.Background(), temporalCancelled, ""))

	// Names carry the workflow code generation (v2: control queues): older
	// files stay, so every generation keeps replaying.
	for name, id := range map[string]string{"v2-pipeline-succeeded": ok, "v2-pipeline-failed": failed, "v2-go-pipeline": goRun,
		"v2-pipeline-cancelled-rest": cancelled, "v2-pipeline-cancelled-temporal": temporalCancelled} {
		r := s.waitTerminal(id, 60*time.Second)
		t.Logf("%s: %s", name, r.State)
		require.NotEqual(t, gen.RunStateRUNNING, r.State)
		// Let the final mirror activity's completion land in history.
		time.Sleep(500 * time.Millisecond)
		record(name, id)
	}
	fmt.Println("recorded histories in workflows/testdata")
}

// recordHistory writes the history of run id to workflows/testdata.
func recordHistory(t *testing.T, s *stack, name, id string) {
	t.Helper()
	iter := s.temporal.GetWorkflowHistory(context.Background(), id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		h.Events = append(h.Events, ev)
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join("..", "workflows", "testdata", name+".json"), b, 0o644))
	// The workflow ID is not in the history, and GPU workload IDs derive
	// from it: the replay test replays under the recorded one.
	idsPath := filepath.Join("..", "workflows", "testdata", "workflow-ids.json")
	ids := map[string]string{}
	if old, err := os.ReadFile(idsPath); err == nil {
		require.NoError(t, json.Unmarshal(old, &ids))
	}
	ids[name] = id
	b, err = json.MarshalIndent(ids, "", "  ")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(idsPath, append(b, '\n'), 0o644))
}

// TestRecordKubeHistories records runs that route steps to a cluster's
// queues: cluster selection, a shared RayCluster, Ray, Spark and Job steps,
// the cleanup on every cluster used, and both cancel paths.
func TestRecordKubeHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	var hang atomic.Bool // the cancel recordings need steps that never end
	e := newKubeEnv(t, func(kind string) kubetest.Exit {
		if hang.Load() {
			return kubetest.Exit{Never: true}
		}
		return outputsScript(kind)
	}, true)
	e.createPipeline("kube", kubePipelineYAML(e.cluster))
	ok := e.start("kube", nil)
	require.Equal(t, gen.RunStateSUCCEEDED, e.waitTerminal(ok, 120*time.Second).State)

	hang.Store(true)
	e.createPipeline("kube-hang", "steps:\n  - name: work\n    kind: ray\n    ray: {entrypoint: python x.py, image: rayproject/ray:2.9.0}\n")
	viaREST := e.start("kube-hang", nil)
	viaTemporal := e.start("kube-hang", nil)
	for _, id := range []string{viaREST, viaTemporal} {
		require.Eventually(t, func() bool { return len(e.runObjects(t, id)) > 0 }, 30*time.Second, 50*time.Millisecond)
	}
	e.cancel(viaREST, "recording")
	require.NoError(t, e.temporal.CancelWorkflow(context.Background(), viaTemporal, ""))
	// Runs recorded before atelier.batched-control keep their v2 histories.
	for name, id := range map[string]string{"v10-kube-succeeded": ok, "v10-kube-cancelled-rest": viaREST, "v10-kube-cancelled-temporal": viaTemporal} {
		r := e.waitTerminal(id, 60*time.Second)
		t.Logf("%s: %s", name, r.State)
		time.Sleep(500 * time.Millisecond)
		recordHistory(t, e.stack, name, id)
	}
}

// TestRecordGPUHistories records runs through GPU admission: a step
// admitted at once, one that waited behind the quota, a preempted and
// re-queued victim, a shared RayCluster admitted for the run, a forEach of
// GPU items admitted in batches, and the cluster's admission workflow
// itself. (The v3 histories, from before atelier.batched-control, stay.)
func TestRecordGPUHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	e := newKubeEnv(t, func(string) kubetest.Exit {
		return kubetest.Exit{After: 4 * time.Second, Message: `{}`}
	}, true, stackOptions{gpuMinRuntime: time.Second})
	e.setupL4Admission(t, "l4-step", 100)
	e.createSharedL4Pipeline("shared-l4", "a")
	running := func(r gen.Run) bool {
		return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateRUNNING
	}
	first := e.start("l4-step", nil)
	second := e.start("l4-step", nil)
	e.waitRun(first, 60*time.Second, "running", running)
	e.waitRun(second, 60*time.Second, "running", running)
	waited := e.start("l4-step", nil)
	e.waitRun(waited, 60*time.Second, "waiting", func(r gen.Run) bool {
		return r.Status != nil && len(r.Status.Steps) == 1 && r.Status.Steps[0].State == gen.StepStateWAITINGFORGPU
	})
	time.Sleep(1500 * time.Millisecond) // past the minimum runtime
	high := e.startRun(gen.CreateRunRequest{Pipeline: ptrTo("l4-step"), GpuPriority: ptrTo(50)})
	for _, id := range []string{first, second, waited, high} {
		require.Equal(t, gen.RunStateSUCCEEDED, e.waitTerminal(id, 120*time.Second).State)
	}
	shared := e.start("shared-l4", nil)
	require.Equal(t, gen.RunStateSUCCEEDED, e.waitTerminal(shared, 120*time.Second).State)
	e.createL4Sweep("sweep")
	sweep := e.start("sweep", nil)
	require.Equal(t, gen.RunStateSUCCEEDED, e.waitTerminal(sweep, 180*time.Second).State)
	victim := ""
	for _, id := range []string{first, second} {
		if r := e.getRun(id); len(val(r.Status.Steps[0].Attempts)) > 1 {
			victim = id
		}
	}
	require.NotEmpty(t, victim, "no run was preempted")
	time.Sleep(500 * time.Millisecond)
	for name, id := range map[string]string{
		"v10-gpu-admitted": high, "v10-gpu-waited": waited, "v10-gpu-preempted": victim, "v10-gpu-shared-raycluster": shared,
		"v10-gpu-foreach": sweep, "v10-gpu-admission": activities.AdmissionWorkflowID(e.cluster),
	} {
		recordHistory(t, e.stack, name, id)
	}
}

// TestRecordRunIfApprovalHistories records runs through trigger rules
// (a diamond joined by noneFailed past a skipped branch; anyFailed and
// allDone steps after a failure) and approval steps (approved through the
// update, rejected, decided by its timeout, cancelled while waiting,
// stopped by another step's failure).
func TestRecordRunIfApprovalHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t)
	// An approval that stops waiting when another step fails.
	gateStopped := `
steps:
  - {name: gate, kind: approval, approval: {message: "run {{ run.id }}?"}}
  - {name: train, container: {command: ["sh", "-c", "sleep 0.5; exit 3"]}}
  - {name: cleanup, dependsOn: [gate, train], runIf: allDone, container: {command: ["true"]}}
`
	for name, yaml := range map[string]string{"diamond": diamondPipeline, "on-failure": onFailurePipeline, "gate": gatePipeline, "gate-timeout": gateTimeoutPipeline, "gate-stopped": gateStopped} {
		s.createPipeline(name, yaml)
	}
	ids := map[string]string{
		"v4-runif-diamond":      s.start("diamond", nil),
		"v4-runif-on-failure":   s.start("on-failure", nil),
		"v4-approval-approved":  s.start("gate", nil),
		"v4-approval-rejected":  s.start("gate", nil),
		"v4-approval-timeout":   s.start("gate-timeout", nil),
		"v4-approval-cancelled": s.start("gate", nil),
		"v4-approval-stopped":   s.start("gate-stopped", nil),
	}
	for name, verb := range map[string]string{"v4-approval-approved": "approve", "v4-approval-rejected": "reject"} {
		s.waitStepState(ids[name], "gate", gen.StepStateWAITINGFORAPPROVAL)
		code, _, body := s.decide(ids[name], "gate", verb, s.token, ptrTo("recording"))
		require.Equal(t, 200, code, "%s", body)
	}
	s.waitStepState(ids["v4-approval-cancelled"], "gate", gen.StepStateWAITINGFORAPPROVAL)
	s.cancel(ids["v4-approval-cancelled"], "recording")
	for name, id := range ids {
		r := s.waitTerminal(id, 60*time.Second)
		t.Logf("%s: %s", name, r.State)
		time.Sleep(500 * time.Millisecond) // the final mirror's completion
		recordHistory(t, s, name, id)
	}
}

// TestRecordExitHistories records runs with exit handlers (after success,
// after a failure with a failing exit handler, after a REST cancel and a
// Temporal cancel, after the deadline, stopped by a second cancel, cut by
// their timeout) and the immediate mirror of an approval request, with a
// webhook subscribed so the mirror queues deliveries.
func TestRecordExitHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t)
	dir := stepScratchDir(t)
	exit := `
onExit:
  - name: report
    container: {command: ["sh", "-c", "echo {{ run.state }} {{ join(run.failedSteps, ',') }} {{ steps.prepare?.outputs?.rows ?? 0 }}"]}
`
	prepare := `
steps:
  - {name: prepare, container: {command: ["sh", "-c", "echo '{\"rows\": 3}' > \"$ATELIER_OUTPUTS\""]}}
`
	for name, yaml := range map[string]string{
		"exit-ok": prepare + "  - {name: train, dependsOn: [prepare], container: {command: [\"true\"]}}\n" + exit,
		"exit-failed": prepare + "  - {name: train, dependsOn: [prepare], container: {command: [\"sh\", \"-c\", \"exit 3\"]}}\n" + exit +
			"  - {name: broken, container: {command: [\"sh\", \"-c\", \"exit 4\"]}}\n" +
			"  - {name: after, dependsOn: [broken], runIf: allDone, container: {command: [\"true\"]}}\n",
		"exit-block":    prepare + fmt.Sprintf("  - {name: train, dependsOn: [prepare], container: {command: [\"sh\", \"-c\", \"echo x > %s/$ATELIER_RUN_ID; sleep 300\"]}}\n", dir) + exit,
		"exit-deadline": "deadline: 2s\n" + prepare + "  - {name: train, dependsOn: [prepare], container: {command: [\"sleep\", \"300\"]}}\n" + exit,
		"exit-hang": prepare + fmt.Sprintf("  - {name: train, dependsOn: [prepare], container: {command: [\"sh\", \"-c\", \"echo x > %s/$ATELIER_RUN_ID; sleep 300\"]}}\n", dir) +
			fmt.Sprintf("onExit:\n  - {name: hang, container: {command: [\"sh\", \"-c\", \"echo x > %s/$ATELIER_RUN_ID.exit; sleep 300\"]}}\n", dir),
		"exit-timeout": prepare + "onExitTimeout: 2s\nonExit:\n  - {name: hang, container: {command: [\"sleep\", \"300\"]}}\n",
		"gate":         gatePipeline,
	} {
		s.createPipeline(name, yaml)
	}
	hook, err := s.client().CreateWebhookWithResponse(context.Background(), s.project, gen.WebhookCreate{
		Url: "http://127.0.0.1:9/nowhere", Events: []gen.WebhookEvent{"run.finished", "step.failed", "approval.requested"},
	})
	require.NoError(t, err)
	require.Equal(t, 201, hook.StatusCode(), "%s", hook.Body)
	ids := map[string]string{
		"v5-exit-succeeded":          s.start("exit-ok", nil),
		"v5-exit-failed":             s.start("exit-failed", nil),
		"v5-exit-cancelled-rest":     s.start("exit-block", nil),
		"v5-exit-cancelled-temporal": s.start("exit-block", nil),
		"v5-exit-deadline":           s.start("exit-deadline", nil),
		"v5-exit-stopped":            s.start("exit-hang", nil),
		"v5-exit-timeout":            s.start("exit-timeout", nil),
		"v5-exit-approval-notice":    s.start("gate", nil),
	}
	for _, name := range []string{"v5-exit-cancelled-rest", "v5-exit-cancelled-temporal", "v5-exit-stopped"} {
		waitFile(t, filepath.Join(dir, ids[name]), 30*time.Second)
	}
	s.cancel(ids["v5-exit-cancelled-rest"], "recording")
	require.NoError(t, s.temporal.CancelWorkflow(context.Background(), ids["v5-exit-cancelled-temporal"], ""))
	s.cancel(ids["v5-exit-stopped"], "first")
	waitFile(t, filepath.Join(dir, ids["v5-exit-stopped"]+".exit"), 30*time.Second)
	s.cancel(ids["v5-exit-stopped"], "second")
	s.waitStepState(ids["v5-exit-approval-notice"], "gate", gen.StepStateWAITINGFORAPPROVAL)
	code, _, body := s.decide(ids["v5-exit-approval-notice"], "gate", "approve", s.token, ptrTo("recording"))
	require.Equal(t, 200, code, "%s", body)
	for name, id := range ids {
		r := s.waitTerminal(id, 60*time.Second)
		t.Logf("%s: %s %v", name, r.State, val(r.Status.Warnings))
		time.Sleep(500 * time.Millisecond) // the final mirror's completion
		recordHistory(t, s, name, id)
	}
}

// TestRecordCacheHistories records runs through the step cache: a first
// run (lookups miss, results stored), an identical run (every cached step
// and item a hit), a run whose changed param makes some items miss, a run
// that bypasses the cache, and a cached step that fails (never stored).
func TestRecordCacheHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t)
	s.createPipeline("cached", `
params:
  - {name: lr, type: number, default: 0.1}
cache: {ttl: 1h}
steps:
  - name: prepare
    cache: {version: "1"}
    container: {command: [sh, -c, 'printf "{\"rows\": 150}" > "$ATELIER_OUTPUTS"']}
  - name: train
    forEach: {items: [1, 2]}
    container:
      command: [sh, -c, 'printf "{\"acc\": 0.9}" > "$ATELIER_OUTPUTS"']
      env: {ITEM: "{{ item }}", LR: "{{ params.lr }}", ROWS: "{{ steps.prepare.outputs.rows }}"}
  - name: report
    cache: {enabled: false}
    container: {command: [sh, -c, 'echo "$ACC"'], env: {ACC: "{{ steps.train.outputs[0].acc }}"}}
`)
	s.createPipeline("cached-fail", `
steps:
  - name: broken
    cache: {}
    retries: {limit: 1, backoff: 1s}
    container: {command: [sh, -c, "exit 3"]}
`)
	// Sequential: each run's hits depend on what the one before stored.
	run := func(body gen.CreateRunRequest) string {
		id := s.startRun(body)
		require.NotEqual(t, gen.RunStateRUNNING, s.waitTerminal(id, 60*time.Second).State)
		return id
	}
	ids := map[string]string{}
	cached := gen.CreateRunRequest{Pipeline: ptrTo("cached")}
	ids["v5-cache-miss"] = run(cached)
	ids["v5-cache-hit"] = run(cached)
	ids["v5-cache-partial"] = run(gen.CreateRunRequest{Pipeline: ptrTo("cached"), Params: &map[string]any{"lr": 0.2}})
	ids["v5-cache-bypass"] = run(gen.CreateRunRequest{Pipeline: ptrTo("cached"), Cache: &gen.RunCacheOptions{Bypass: ptrTo(true)}})
	ids["v5-cache-failed"] = run(gen.CreateRunRequest{Pipeline: ptrTo("cached-fail")})
	for name, id := range ids {
		r := s.waitTerminal(id, 60*time.Second)
		t.Logf("%s: %s", name, r.State)
		time.Sleep(500 * time.Millisecond) // the final mirror's completion
		recordHistory(t, s, name, id)
	}
}

// TestRecordChildPipelineHistories records runs with pipeline steps
// (v5-child-*): a parent whose child succeeds (a forEach of children
// too) with outputs, one whose child fails, and both cancel paths, each
// with its child's history (-child), which replays as a child execution.
func TestRecordChildPipelineHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t)
	dir := stepScratchDir(t)
	for name, yaml := range map[string]string{
		"train-model": childTrain,
		"broken":      "steps: [{name: boom, container: {command: [\"sh\", \"-c\", \"exit 4\"]}}]",
		"long":        fmt.Sprintf("steps: [{name: work, container: {command: [\"sh\", \"-c\", \"echo $$ > %s/pid; sleep 300\"]}}]", dir),
	} {
		code, problems := s.push(name, yaml)
		require.Equal(t, 201, code, "%s: %v", name, problems)
	}
	for name, yaml := range map[string]string{
		"parent": `
steps:
  - {name: train, kind: pipeline, pipeline: {name: train-model, params: {dataset: iris}}}
  - {name: sweep, kind: pipeline, forEach: {items: [0.1, 0.2], parallelism: 1}, pipeline: {name: train-model, params: {dataset: iris, lr: "{{ item }}"}}}
  - {name: report, container: {command: ["sh", "-c", "echo {{ steps.train.outputs.model }}"]}}
outputs: {model: "{{ steps.train.outputs.model }}"}
`,
		"parent-of-broken": "steps: [{name: sub, kind: pipeline, retries: {limit: 1, backoff: 1s}, pipeline: {name: broken}}]",
		"outer":            "steps: [{name: sub, kind: pipeline, pipeline: {name: long}}]",
	} {
		code, problems := s.push(name, yaml)
		require.Equal(t, 201, code, "%s: %v", name, problems)
	}
	ok := s.start("parent", nil)
	failed := s.start("parent-of-broken", nil)
	viaREST := s.start("outer", nil)
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)
	s.cancel(viaREST, "recording")
	require.NoError(t, os.Remove(filepath.Join(dir, "pid")))
	viaTemporal := s.start("outer", nil)
	waitFile(t, filepath.Join(dir, "pid"), 30*time.Second)
	require.NoError(t, s.temporal.CancelWorkflow(context.Background(), viaTemporal, ""))

	ids := map[string]string{
		"v5-child-succeeded": ok, "v5-child-succeeded-child": ok + ".train.a1",
		"v5-child-failed": failed, "v5-child-failed-child": failed + ".sub.a2",
		"v5-child-cancelled-rest": viaREST, "v5-child-cancelled-rest-child": viaREST + ".sub.a1",
		"v5-child-cancelled-temporal": viaTemporal, "v5-child-cancelled-temporal-child": viaTemporal + ".sub.a1",
	}
	for name, id := range ids {
		r := s.waitTerminal(id, 60*time.Second)
		t.Logf("%s: %s", name, r.State)
		time.Sleep(500 * time.Millisecond) // the final mirror's completion
		recordHistory(t, s, name, id)
	}
}

// TestRecordAttrsHistories records runs carrying the AtelierCreatedBy and
// AtelierSchedule search attributes (a REST start and a scheduled start),
// through the paths whose metrics workflow code emits: forEach items, a
// failed attempt retried after its backoff, a failed step and the step it
// skips.
func TestRecordAttrsHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t)
	s.createPipeline("counted", `
steps:
  - name: first
    container: {command: ["true"]}
  - name: fan
    dependsOn: [first]
    forEach: {items: [1, 2, 3], parallelism: 2}
    container: {command: ["true"]}
  - name: broken
    dependsOn: [fan]
    retries: {limit: 1, backoff: 1s}
    container: {command: ["sh", "-c", "exit 3"]}
  - name: never
    dependsOn: [broken]
    container: {command: ["true"]}
`)
	s.createPipeline("quick", "steps:\n  - name: hello\n    container: {command: [\"true\"]}\n")
	ci := s.client()
	counted := s.start("counted", nil)
	every := []string{"1h"}
	const name = "v5-recorded"
	sc, err := ci.CreateScheduleWithResponse(context.Background(), s.project, gen.ScheduleCreate{Name: name, Pipeline: "quick", Every: &every})
	require.NoError(t, err)
	require.Equal(t, 201, sc.StatusCode(), "%s", sc.Body)
	t.Cleanup(func() { _, _ = ci.DeleteScheduleWithResponse(context.Background(), s.project, name) })
	_, err = ci.TriggerScheduleWithResponse(context.Background(), s.project, name)
	require.NoError(t, err)
	var scheduled []string
	for deadline := time.Now().Add(30 * time.Second); len(scheduled) == 0 && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		scheduled = listed(t, s, "AtelierSchedule='"+name+"'")
	}
	require.Len(t, scheduled, 1)
	for file, id := range map[string]string{"v5-attrs-created-by-counted": counted, "v5-attrs-scheduled": scheduled[0]} {
		r := s.waitTerminal(id, 60*time.Second)
		t.Logf("%s: %s", file, r.State)
		time.Sleep(500 * time.Millisecond)
		recordHistory(t, s, file, id)
	}
}

// TestRecordWideHistories records wide forEach runs (workflows/wide.go):
// the pipeline workflow and one of its batch workflows for a run that
// succeeds with a reducer over the items' outputs, one that fails fast,
// and one cancelled through REST.
//
//	ATELIER_RECORD_HISTORIES=1 go test ./integration -run TestRecordWideHistories
func TestRecordWideHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t, stackOptions{concurrency: 100})
	dir := stepScratchDir(t)
	s.createPipeline("wide-ok", `
steps:
  - name: fan
    forEach: {items: "0..1100", parallelism: 50}
    container: {command: ["sh", "-c", "echo '{\"v\": {{ item }}}' > $ATELIER_OUTPUTS"]}
  - name: total
    container: {command: ["sh", "-c", "echo {{ sum(map(steps.fan.outputs, .v)) }}"]}
`)
	s.createPipeline("wide-fail", `
steps:
  - name: fan
    forEach: {items: "0..1100", parallelism: 50}
    container: {command: ["sh", "-c", "test {{ item }} -ne 60"]}
`)
	s.createPipeline("wide-block", `
steps:
  - name: fan
    forEach: {items: "0..1100", parallelism: 20}
    container: {command: ["sh", "-c", "touch `+dir+`/started-{{ item }}; exec sleep 600"]}
`)
	ok := s.start("wide-ok", nil)
	failed := s.start("wide-fail", nil)
	cancelled := s.start("wide-block", nil)
	require.Eventually(t, func() bool {
		m, _ := filepath.Glob(filepath.Join(dir, "started-*"))
		return len(m) >= 20
	}, 2*time.Minute, 100*time.Millisecond)
	s.cancel(cancelled, "recording")

	want := map[string]gen.RunState{ok: gen.RunStateSUCCEEDED, failed: gen.RunStateFAILED, cancelled: gen.RunStateCANCELLED}
	for _, id := range []string{ok, failed, cancelled} {
		r := s.waitTerminal(id, 3*time.Minute)
		require.Equal(t, want[id], r.State, "%s", val(r.Status.Error))
	}
	time.Sleep(500 * time.Millisecond) // the final mirror's completion
	for name, id := range map[string]string{
		"v5-wide-succeeded": ok, "v5-wide-batch-succeeded": ok + ".fan.batch-0",
		"v5-wide-failed": failed, "v5-wide-batch-failed": failed + ".fan.batch-0",
		"v5-wide-cancelled-rest": cancelled, "v5-wide-batch-cancelled": cancelled + ".fan.batch-0",
	} {
		recordHistory(t, s, name, id)
	}
	fmt.Println("recorded wide histories in workflows/testdata")
}

// TestRecordWideTemplateHistories records a run whose wide step, small
// forEach and approval read a wide step's outputs (the
// atelier.wide-templates paths: workflows/widetemplates.go), and the batch
// of the wide step that renders its items through the activity.
//
//	ATELIER_RECORD_HISTORIES=1 go test ./integration -run TestRecordWideTemplateHistories
func TestRecordWideTemplateHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t, stackOptions{concurrency: 100})
	id, r := runWideTemplates(t, s)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	time.Sleep(500 * time.Millisecond) // the final mirror's completion
	recordHistory(t, s, "v6-wide-templates", id)
	recordHistory(t, s, "v6-wide-templates-batch", id+".twice.batch-0")
}

// TestRecordWideExitHistories records a run whose outputs and exit
// handlers read a wide step's outputs (atelier.wide-exit-outputs:
// workflows/wideexit.go), and a wide forEach over a list computed from
// wide outputs that stays out of the pipeline's history, with one of its
// batches (workflows/wide.go, runWideByRef).
//
//	ATELIER_RECORD_HISTORIES=1 go test ./integration -run TestRecordWideExitHistories
func TestRecordWideExitHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	s := newStack(t, stackOptions{concurrency: 100})
	id, r := runWideExit(t, s)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	time.Sleep(500 * time.Millisecond) // the final mirror's completion
	recordHistory(t, s, "v6-wide-exit-outputs", id)
	id, r = runWideList(t, s)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	time.Sleep(500 * time.Millisecond)
	recordHistory(t, s, "v6-wide-list-by-ref", id)
	recordHistory(t, s, "v6-wide-list-by-ref-batch", id+".each.batch-0")
}

// TestRecordWideKubeHistories records a run whose wide container step has
// a placement (its items are Jobs on the test cluster: the
// atelier.wide-kube path, workflows/wide.go) and the first batch of that
// step.
//
//	ATELIER_RECORD_HISTORIES=1 go test ./integration -run TestRecordWideKubeHistories
//
// v6-wide-kube-refused.json, the same kind of run failing at the refusal
// that atelier.wide-kube replaced, was recorded at commit 6216c27 (before
// the change) with the pipeline of this test and a cluster registered in
// the catalogue; it cannot be recorded again from later code.
func TestRecordWideKubeHistories(t *testing.T) {
	if os.Getenv("ATELIER_RECORD_HISTORIES") == "" {
		t.Skip("set ATELIER_RECORD_HISTORIES=1 to re-record workflows/testdata histories")
	}
	e := newKubeEnv(t, outputsScript, true, stackOptions{concurrency: 200, podScript: itemOutput})
	e.createPipeline("wide-kube", wideKubePipeline(e.cluster, 50))
	id := e.start("wide-kube", nil)
	r := e.waitTerminal(id, 15*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
	time.Sleep(500 * time.Millisecond) // the final mirror's completion
	recordHistory(t, e.stack, "v6-wide-kube", id)
	recordHistory(t, e.stack, "v6-wide-kube-batch", id+".fan.batch-0")
}
