package workflows

import (
	"fmt"
	"strconv"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Artifacts move between steps as references: a step's status lists the
// artifacts it wrote (digest, size, producer), and a step that reads one
// gets that reference in its request; the worker moves the bytes.
// Resolving a step's outputs adds no workflow command, so runs without
// artifacts replay as before; reading a wide step's artifact does (the
// fan-in activity, versioned: resolveWideFanIns).

// artifactInputs resolves a step's input artifacts against the run's
// steps that ended, each "<step>.<artifact>" to the producer's reference
// under the input's name. msg says why one cannot be resolved (the
// producer was skipped, or did not write it): the step fails with it.
func (r *Run) artifactInputs(stepName string, item *int, a *pipeline.Artifacts) ([]runstate.Artifact, string) {
	if a == nil || len(a.Inputs) == 0 {
		return nil, ""
	}
	out := make([]runstate.Artifact, 0, len(a.Inputs))
	refs := r.resolvedRefs[refKey(stepName, item)]
	for _, in := range a.Inputs {
		if in.IsRef() {
			if len(refs) == 0 {
				return nil, fmt.Sprintf("input artifact %q: %s was not resolved", in.Name, in.Ref())
			}
			out, refs = append(out, refs[0]), refs[1:]
			continue
		}
		step, name, ok := pipeline.SplitArtifactRef(in.From)
		if !ok {
			return nil, fmt.Sprintf("input artifact %q: %q is not <step>.<artifact>", in.Name, in.From)
		}
		src := r.stepByName(step)
		if src == nil {
			return nil, fmt.Sprintf("input artifact %q: the run has no step %q", in.Name, step)
		}
		if src.Wide != nil {
			// Assembled by resolveWideFanIns before the step's cache
			// key; absent in runs from before, which failed here.
			art, ok := r.fanIns[fanInKey(step, name)]
			if !ok || !art.done {
				return nil, fmt.Sprintf("input artifact %q: step %q is a wide forEach (over %d items): reading its items' artifacts is not supported yet", in.Name, step, pipeline.WideThreshold)
			}
			a := art.art
			a.From, a.Name = in.From, in.Name
			out = append(out, a)
			continue
		}
		if len(src.Items) > 0 {
			// A forEach: every item's artifact, under its index.
			for k := range src.Items {
				it := &src.Items[k]
				found := false
				for _, art := range it.Artifacts {
					if art.Name == name {
						art.From, art.Name = fmt.Sprintf("%s[%d].%s", step, k, name), in.Name+"/"+strconv.Itoa(k)
						out = append(out, art)
						found = true
					}
				}
				if !found && src.Kind == string(pipeline.KindPipeline) && succeeded(it) {
					// A container item that succeeded wrote every
					// declared output; a child run may not export it.
					return nil, fmt.Sprintf("input artifact %q: item %d of %s", in.Name, k, missingExport(step, it, name))
				}
			}
			continue
		}
		found := false
		for _, art := range src.Artifacts {
			if art.Name == name {
				art.From, art.Name = in.From, in.Name
				out = append(out, art)
				found = true
				break
			}
		}
		if !found {
			if src.Kind == string(pipeline.KindPipeline) && succeeded(src) {
				return nil, fmt.Sprintf("input artifact %q: %s", in.Name, missingExport(step, src, name))
			}
			return nil, fmt.Sprintf("input artifact %q: step %q (%s) has no output artifact %q", in.Name, step, src.State, name)
		}
	}
	return out, ""
}

// missingExport says that the pipeline step (or item) st, which succeeded,
// carries no artifact name: its child run, named with its pipeline and
// version, did not export it. The spec cannot say so in advance: the
// child pipeline is stored apart, and without a pinned version the step
// runs the newest one.
func missingExport(step string, st *runstate.StepStatus, name string) string {
	child := "its child pipeline"
	if n := len(st.Attempts); n > 0 && st.Attempts[n-1].ChildRun != nil {
		c := st.Attempts[n-1].ChildRun
		child = fmt.Sprintf("%s (child run %s)", pipeline.ChildLabel(c.Pipeline, c.Version), c.RunID)
	}
	exports := make([]string, 0, len(st.Artifacts))
	for _, a := range st.Artifacts {
		exports = append(exports, a.Name)
	}
	return pipeline.MissingExport(step, child, name, exports) +
		" (if that pipeline lists it, its step wrote nothing in that run: see the child run's warnings)"
}

// succeeded reports whether st ended SUCCEEDED, or CACHED (reused by a
// retry with what it carried).
func succeeded(st *runstate.StepStatus) bool {
	return st.State == runstate.StepSucceeded || st.State == runstate.StepCached
}

// versionArtifactRefs guards the local activity that resolves catalogue
// inputs (workflow.GetVersion change ID; never reuse it). It is asked only
// when a step has such inputs, so other runs carry no marker.
const versionArtifactRefs = "atelier.artifact-refs"

func refKey(stepName string, item *int) string {
	if item == nil {
		return stepName
	}
	return stepName + "[" + strconv.Itoa(*item) + "]"
}

// versionArtifactImports guards the activity that imports a step's URI
// inputs (workflow.GetVersion change ID; never reuse it). Asked only when
// a step has such inputs.
const versionArtifactImports = "atelier.artifact-imports"

// importTimeout bounds one import attempt; its heartbeats, not this,
// notice a lost worker.
const importTimeout = 24 * time.Hour

// resolveArtifactRefs resolves the step's inputs that are not another
// step's output, before anything else about the step, so that the cache
// key and the request see their digests: catalogue inputs (artifact IDs,
// model versions) with one local activity, URIs by importing their bytes
// (activities/imports, one activity for the step's URIs). msg says why the
// step cannot run (an unknown artifact or model, a URI not allowed or
// absent).
func (r *Run) resolveArtifactRefs(ctx workflow.Context, stepName string, item *int, a *pipeline.Artifacts) string {
	var refs, uris []pipeline.ArtifactInput
	if a != nil {
		for _, in := range a.Inputs {
			switch {
			case in.IsImport():
				uris = append(uris, in)
			case in.IsRef():
				refs = append(refs, in)
			}
		}
	}
	if len(refs) == 0 && len(uris) == 0 {
		return ""
	}
	var resolved, imported []runstate.Artifact
	if len(refs) > 0 {
		if workflow.GetVersion(r.root, versionArtifactRefs, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			return "this run was recorded before steps could read artifacts by ID or model"
		}
		lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			ScheduleToCloseTimeout: time.Minute,
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 5 * time.Second, MaximumAttempts: 10,
			},
		})
		var res activities.ResolveArtifactsResult
		err := workflow.ExecuteLocalActivity(lctx, activities.ResolveArtifactsName, activities.ResolveArtifactsRequest{
			Project: r.status.Project, Inputs: refs,
		}).Get(lctx, &res)
		switch {
		case err != nil:
			return "resolving the step's input artifacts failed: " + stepErrMessage(err)
		case res.Problem != "":
			return res.Problem
		case len(res.Artifacts) != len(refs):
			return fmt.Sprintf("resolving the step's input artifacts answered %d references for %d inputs", len(res.Artifacts), len(refs))
		}
		resolved = res.Artifacts
	}
	if len(uris) > 0 {
		if workflow.GetVersion(r.root, versionArtifactImports, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			return "this run was recorded before steps could import input artifacts from a URI"
		}
		actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: importTimeout,
			HeartbeatTimeout:    time.Minute,
			RetryPolicy: &temporal.RetryPolicy{
				InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute, MaximumAttempts: 5,
			},
		})
		var res activities.ResolveArtifactsResult
		err := workflow.ExecuteActivity(actx, activities.ImportArtifactsName, activities.ImportArtifactsRequest{
			Project: r.status.Project, RunID: r.status.RunID, Step: stepName, Item: item, Inputs: uris,
		}).Get(actx, &res)
		switch {
		case err != nil:
			return "importing the step's input artifacts failed: " + stepErrMessage(err)
		case res.Problem != "":
			return res.Problem
		case len(res.Artifacts) != len(uris):
			return fmt.Sprintf("importing the step's input artifacts answered %d references for %d inputs", len(res.Artifacts), len(uris))
		}
		imported = res.Artifacts
	}
	// In the inputs' order, as artifactInputs takes them.
	all := make([]runstate.Artifact, 0, len(resolved)+len(imported))
	for _, in := range a.Inputs {
		switch {
		case in.IsImport():
			all, imported = append(all, imported[0]), imported[1:]
		case in.IsRef():
			all, resolved = append(all, resolved[0]), resolved[1:]
		}
	}
	if r.resolvedRefs == nil {
		r.resolvedRefs = map[string][]runstate.Artifact{}
	}
	r.resolvedRefs[refKey(stepName, item)] = all
	return ""
}

// versionWideFanIn guards reading a wide step's artifact (the fan-in
// activity, activities.FanInName): before it, such a step failed saying
// it was not supported. Asked only by steps that read one, so other runs
// record no marker.
const versionWideFanIn = "atelier.wide-fan-in"

// wideFanIn is the fan-in of one wide step's artifact in this run: made
// once, whichever steps (items) read it.
type wideFanIn struct {
	done bool
	art  runstate.Artifact
	msg  string // why it could not be made
}

func fanInKey(step, artifact string) string { return step + "." + artifact }

// resolveWideFanIns assembles the directories of the wide steps'
// artifacts the step reads ("<wide step>.<artifact>": each item's under
// its index), one activity per artifact and run, before the step's cache
// key is computed, so that the key and the request carry their digests.
// The items' references live in Postgres; only the directory's enters
// the history. msg says why the step cannot run.
func (r *Run) resolveWideFanIns(ctx workflow.Context, a *pipeline.Artifacts) string {
	if a == nil {
		return ""
	}
	for _, in := range a.Inputs {
		if in.IsRef() {
			continue
		}
		step, name, ok := pipeline.SplitArtifactRef(in.From)
		src := r.stepByName(step)
		if !ok || src == nil || src.Wide == nil {
			continue
		}
		key := fanInKey(step, name)
		f, ok := r.fanIns[key]
		if !ok {
			if workflow.GetVersion(r.root, versionWideFanIn, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
				return "" // artifactInputs fails the step, as it did
			}
			if r.fanIns == nil {
				r.fanIns = map[string]*wideFanIn{}
			}
			f = &wideFanIn{}
			r.fanIns[key] = f
			f.art, f.msg = r.fanIn(ctx, src, name)
			f.done = true
		}
		// Another step (item) may be assembling it.
		if err := workflow.Await(ctx, func() bool { return f.done }); err != nil {
			return "run cancelled"
		}
		if f.msg != "" {
			return fmt.Sprintf("input artifact %q: %s", in.Name, f.msg)
		}
	}
	return ""
}

// fanIn runs the fan-in activity for wide step src's artifact name.
func (r *Run) fanIn(ctx workflow.Context, src *runstate.StepStatus, name string) (runstate.Artifact, string) {
	ref := runstate.WideRef{Run: r.ID(), Step: src.Name, Items: src.Wide.Items}
	if src.Wide.Outputs != nil {
		ref = *src.Wide.Outputs // a retry's reused step points at its run's items
	}
	return r.runFanIn(ctx, activities.FanInRequest{Project: r.status.Project, Wide: ref, Artifact: name})
}

// smallFanIn is the fan-in request of forEach step st's artifact name
// (a small forEach: its items' references are in its status), or false
// when no item wrote it.
func (r *Run) smallFanIn(st *runstate.StepStatus, name string) (activities.FanInRequest, bool) {
	req := activities.FanInRequest{Project: r.status.Project, Wide: runstate.WideRef{Run: r.ID(), Step: st.Name, Items: len(st.Items)}, Artifact: name}
	for k := range st.Items {
		for _, a := range st.Items[k].Artifacts {
			if a.Name == name {
				req.Items = append(req.Items, activities.FanInItem{Index: k, Type: a.Type, Digest: a.Digest, Size: a.Size, Files: a.Files})
			}
		}
	}
	return req, len(req.Items) > 0
}

// runFanIn runs the fan-in activity: the directory of the items'
// artifacts, or why it could not be made.
func (r *Run) runFanIn(ctx workflow.Context, req activities.FanInRequest) (runstate.Artifact, string) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: r.controlQueue(""),
		// 100,000 directory items are 100,000 manifests to read.
		StartToCloseTimeout: 15 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 10,
			NonRetryableErrorTypes: []string{activities.ErrTypeInvalidStep},
		},
	})
	var res activities.FanInResult
	err := workflow.ExecuteActivity(actx, activities.FanInName, req).Get(actx, &res)
	switch {
	case err != nil:
		return runstate.Artifact{}, fmt.Sprintf("assembling the artifacts %q of the items of step %q failed: %s", req.Artifact, req.Wide.Step, stepErrMessage(err))
	case res.Problem != "":
		return runstate.Artifact{}, res.Problem
	}
	return res.Artifact, ""
}
