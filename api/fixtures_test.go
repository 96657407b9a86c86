package api

import (
	"encoding/json"
	"time"

	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/gpu"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// Fixtures of internal types with every field set (fullX) or as empty as
// allowed (minimalX). The golden files in testdata/ hold the JSON the
// gateway sent for them before REST types were separated from internal
// ones (x-go-type mappings); convert_test.go checks the conversion still
// renders exactly those bytes, and that the full fixtures leave no field
// unset, so a new internal field cannot reach or miss the API silently.

var (
	fxStart  = time.Date(2025, 6, 1, 12, 0, 1, 500_000_000, time.UTC)
	fxFinish = time.Date(2025, 6, 1, 12, 5, 0, 0, time.FixedZone("CEST", 2*3600))
)

func fullAttempt(n int, state runstate.StepState) runstate.Attempt {
	code := 3
	return runstate.Attempt{
		Number: n, State: state, StartedAt: &fxStart, FinishedAt: &fxFinish, ExitCode: &code,
		Error:   "exit status 3 <stderr & more>",
		LogURL:  "/v1/projects/alpha/runs/r1/steps/train/logs?attempt=1",
		Cluster: "gpu-east", Object: "RayJob/atelier-alpha/r1-train-1",
		Links:   map[string]string{"dashboard": "http://ray.example/#/jobs/1", "kubectl": "kubectl logs -n atelier-alpha job/x"},
		Message: "Unschedulable: pod x: 0/10 nodes are available: 10 Insufficient nvidia.com/gpu.",
	}
}

func fullStepStatus() runstate.StepStatus {
	return runstate.StepStatus{
		Name: "shard", Kind: "container", State: runstate.StepFailed,
		StartedAt: &fxStart, FinishedAt: &fxFinish,
		Attempts:  []runstate.Attempt{fullAttempt(1, runstate.StepFailed), fullAttempt(2, runstate.StepFailed)},
		Outputs:   map[string]any{"rows": json.Number("12"), "files": []any{"a", "b"}},
		Error:     "1 of 2 items failed",
		Message:   "skipped dependents: <none>",
		Item:      map[string]any{"region": "eu"},
		CacheKey:  "084fb6a2ab4f1d43f1901b54c513fe45620a00ca1791f0922899be779630f016",
		Artifacts: []runstate.Artifact{fullArtifact("model", "")},
		Inputs:    []runstate.Artifact{fullArtifact("dataset", "prepare.data")},
		Metrics:   &runstate.Metrics{Scalars: map[string]float64{"accuracy": 0.93}, Series: map[string][]float64{"loss": {0.9, 0.5}}},
		Items: []runstate.StepStatus{{
			Name: "shard[0]", Kind: "container", State: runstate.StepSucceeded, StartedAt: &fxStart, FinishedAt: &fxFinish,
			Attempts: []runstate.Attempt{fullAttempt(1, runstate.StepSucceeded)},
			Outputs:  map[string]any{"rows": 5}, Error: "none", Message: "cached", Item: "eu-1",
			Items: []runstate.StepStatus{{Name: "deep", Kind: "container", State: runstate.StepCached,
				CachedFrom: &runstate.CacheSource{Run: "run-0", Step: "shard", Item: ptr(1), Attempt: 2, At: &fxStart}}},
		}, {
			Name: "shard[1]", Kind: "container", State: runstate.StepFailed,
			Attempts: []runstate.Attempt{{Number: 1, State: runstate.StepRetrying}}, Item: 2.5,
		}},
	}
}

func fullArtifact(name, from string) runstate.Artifact {
	return runstate.Artifact{
		ID: "5f1c0e9d2b7a4c3e8f6a1b2c3d4e5f60", Name: name, From: from, Type: "model",
		Digest: "sha256:084fb6a2ab4f1d43f1901b54c513fe45620a00ca1791f0922899be779630f016", Size: 1 << 33, Files: 3,
		Producer: runstate.ArtifactProducer{Run: "run-0", Step: "prepare", Item: ptr(2), Attempt: 1},
		Register: "fraud-detector",
		Source:   "s3://datasets/fraud/2026-11/",
	}
}

func fullRunStatus() runstate.Status {
	return runstate.Status{
		RunID: "0197a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", Project: "alpha", Pipeline: "train", Version: 7,
		Workflow: runstate.PipelineWorkflowName, State: runstate.Cancelled, Seq: 42,
		StartedAt: &fxStart, FinishedAt: &fxFinish, Error: "cancelled: <by ci>",
		Cancel: &runstate.CancelRequest{Reason: "stop & go", Requester: "ci (tok-1)", At: fxFinish},
		Params: map[string]any{"lr": 0.01, "epochs": json.Number("3"), "tags": []any{"x", true, nil}, "nested": map[string]any{"b": 1, "a": "z"}},
		Steps: []runstate.StepStatus{
			fullStepStatus(),
			{Name: "report", Kind: "ray", State: runstate.StepSkipped, Message: "dependency shard failed", OnExit: true, Wide: &runstate.WideStatus{
				Items: 5000, Batches: 10, BatchesDone: 4, Parallelism: 200,
				Counts:   runstate.ItemCounts{Succeeded: 1990, Failed: 3, Cancelled: 4, Cached: 5, NotRun: 2997, Skipped: 1},
				Failures: []runstate.ItemFailure{{Index: 7, Item: map[string]any{"f": "a<b>"}, Error: "exit 1"}},
				Outputs:  &runstate.WideRef{Run: "r0", Step: "report", Items: 5000},
			}},
			{Name: "gate", Kind: "approval", State: runstate.StepFailed, Approval: &runstate.ApprovalStatus{
				Message: "ship <it>?", Roles: []string{"editor", "admin"}, CommentRequired: true,
				Deadline: &fxFinish, OnTimeout: "reject", Decision: runstate.ApprovalRejected,
				Approver: "ci", ApproverID: "tok-1", ApproverRole: "editor", Comment: "not & now",
				DecidedAt: &fxFinish, TimedOut: true,
			}},
			{Name: "sub", Kind: "pipeline", State: runstate.StepSucceeded, Outputs: map[string]any{"model": "m"},
				Attempts: []runstate.Attempt{{Number: 1, State: runstate.StepSucceeded,
					ChildRun: &runstate.ChildRun{RunID: "0197a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b.sub.a1", Pipeline: "train-model", Version: 3}, Execution: 2}}},
		},
		Result:      map[string]any{"model": "s3://bucket/model", "score": 0.93},
		Warnings:    []string{"cleanup of RayJob r1 failed: <timeout>", "second"},
		ScheduleID:  "nightly",
		Targets:     []string{"train"},
		CreatedBy:   "ci",
		RetryOf:     "run-0",
		CacheBypass: true,
		ParentRun:   "0197a1b2-0000-7e5f-8a9b-0c1d2e3f4a5b",
		ParentStep:  "train[2]",
	}
}

func fullCacheEntry() catalog.CacheEntry {
	item := 3
	return catalog.CacheEntry{
		Project: "alpha", Key: "084fb6a2ab4f1d43f1901b54c513fe45620a00ca1791f0922899be779630f016", Pipeline: "train",
		Step: "shard", Item: &item, RunID: "run-0", Attempt: 2, Outputs: map[string]any{"rows": json.Number("12"), "uri": "s3://b/<x>"},
		Artifacts: []runstate.Artifact{fullArtifact("model", "")},
		Metrics:   &runstate.Metrics{Scalars: map[string]float64{"accuracy": 0.93}},
		CreatedAt: fxStart, ExpiresAt: &fxFinish,
	}
}

// minimalRunStatus has only the required fields, and empty (not nil)
// optional collections, which omitempty drops.
func minimalRunStatus() runstate.Status {
	return runstate.Status{
		RunID: "r2", Project: "alpha", Workflow: "etl", State: runstate.Pending,
		Params:   map[string]any{},
		Warnings: []string{},
		Steps: []runstate.StepStatus{{
			Name: "s", Kind: "container", State: runstate.StepPending,
			Attempts: []runstate.Attempt{}, Items: []runstate.StepStatus{},
		}, {
			Name: "t", Kind: "container", State: runstate.StepRunning,
			Attempts: []runstate.Attempt{{Number: 1, State: runstate.StepRunning, Links: map[string]string{}}},
		}},
	}
}

// nilStepsRunStatus: a run whose status has no steps yet ("steps": null).
func nilStepsRunStatus() runstate.Status {
	return runstate.Status{RunID: "r3", Project: "beta", Workflow: "etl", State: runstate.Running, Seq: 1}
}

func fullProject() catalog.Project {
	return catalog.Project{Name: "alpha", Description: "vision <team>", CreatedAt: fxStart}
}

func fullToken() catalog.Token {
	return catalog.Token{ID: "tok-1", Name: "ci", Project: "alpha", Role: tokens.RoleEditor, CreatedAt: fxStart, ExpiresAt: &fxFinish}
}

func fullPipelineVersion() catalog.PipelineVersion {
	return catalog.PipelineVersion{
		Project: "alpha", Pipeline: "train", Version: 3,
		// b depends on a implicitly (its command reads a's outputs), c
		// explicitly; the graph in the golden file shows both.
		Spec: json.RawMessage(`{"name":"train","steps":[{"name":"a","container":{"image":"x","command":["echo","<&>"]}},` +
			`{"name":"b","kind":"container","when":"params.go","forEach":{"items":[1,2]},"container":{"image":"x","command":["echo","{{ steps.a.outputs.x }}"]}},` +
			`{"name":"c","dependsOn":["b","a"],"runIf":"allDone","continueOn":"failed","container":{"image":"x","command":["true"]}}]}`),
		Digest: "sha256:0123abcd", CreatedAt: fxStart, CreatedBy: "ci",
	}
}

func fullPipeline() catalog.Pipeline {
	return catalog.Pipeline{Project: "alpha", Name: "train", LatestVersion: 3, CreatedAt: fxStart, UpdatedAt: fxFinish}
}

func fullGoWorkflow() catalog.GoWorkflow {
	return catalog.GoWorkflow{Name: "etl", Description: "nightly ETL", TaskQueue: "go-q", UpdatedAt: fxStart}
}

func fullClusterCapacity() catalog.ClusterCapacity {
	return catalog.ClusterCapacity{
		GPUs:        map[string]catalog.ResourceAmount{"NVIDIA-A100-SXM4-80GB": {Total: 16, Free: 9}, "unknown": {Total: 1}},
		CPUMillis:   catalog.ResourceAmount{Total: 128000, Free: 64000},
		MemoryBytes: catalog.ResourceAmount{Total: 1 << 40, Free: 1 << 39},
		Nodes:       2,
		GPUNodes: []gpu.Node{
			{Name: "a100-1", GPUType: "NVIDIA-A100-SXM4-80GB", GPUMemoryMiB: 81920, GPUs: 8, GPUsInUse: 2, Ready: true, Unschedulable: true,
				MIG:    []gpu.MIGSlices{{Profile: "nvidia.com/mig-1g.10gb", Allocatable: 7, InUse: 1}},
				Taints: []gpu.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: gpu.NoSchedule}}},
			{Name: "l4-1", GPUs: 1},
		},
		KueueQueue: "team-q",
	}
}

// fullRunRow is a catalogue row with every field the API shows set.
func fullRunRow() catalog.Run {
	st := fullRunStatus()
	return catalog.Run{
		ID: st.RunID, Project: "alpha", Pipeline: "train", Version: 7, Workflow: runstate.PipelineWorkflowName,
		State: runstate.Running, CreatedAt: fxStart, UpdatedAt: fxFinish, CreatedBy: "ci",
		IdempotencyKey: "k", RequestHash: "h", Input: json.RawMessage(`{}`), Status: &st,
	}
}

func fullCluster() catalog.Cluster {
	capacity := fullClusterCapacity()
	return catalog.Cluster{
		Name: "east", Description: "GPU pool", Labels: map[string]string{"region": "east"}, TaskQueue: "atelier-k8s-east",
		CreatedAt: fxStart, UpdatedAt: fxStart, LastSeenAt: &fxStart, Capacity: &capacity,
	}
}

// pipelineSchedule and goSchedule are the schedules of a declarative
// pipeline and of a native Go pipeline, each with every field of its kind.
func pipelineSchedule() runclient.ScheduleView {
	return runclient.ScheduleView{
		Project: "alpha", Name: "nightly", Pipeline: "train", Version: 3, Params: map[string]any{"lr": 0.1}, CreatedBy: "ci",
		Cron: []string{"0 2 * * *"}, Every: []time.Duration{6 * time.Hour}, TimeZone: "Europe/Paris", Jitter: 5 * time.Minute,
		CatchupWindow: time.Hour, Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE, Paused: true, Note: "maintenance",
		Runs: 4, SkippedOverlap: 1, NextRuns: []time.Time{fxStart},
		RecentRuns: []runclient.ScheduledRun{{RunID: "sched.alpha.nightly-2025-06-01T02:00:00Z", ScheduledAt: fxStart, StartedAt: fxStart}},
		CreatedAt:  fxStart,
	}
}

func goSchedule() runclient.ScheduleView {
	return runclient.ScheduleView{
		Project: "alpha", Name: "hourly", Workflow: "example.TrainEvaluate", Input: json.RawMessage(`{"dataset":"iris"}`),
		CreatedBy: "ci", Every: []time.Duration{time.Hour}, Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, CreatedAt: fxStart,
	}
}
