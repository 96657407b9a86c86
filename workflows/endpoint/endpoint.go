package endpoint

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/schema"
)

// Defaults of the endpoint loop.
const (
	// DefaultTick is how often the endpoint observes its replicas
	// and decides (Knative's autoscaler ticks every 2 s).
	DefaultTick = 2 * time.Second
	// endpointHistoryLimit: past this many history events the workflow
	// continues as new with its state (a tick costs about 10 events).
	endpointHistoryLimit = 10000
	// maxEndpointEvents bounds the events kept in the state.
	maxEndpointEvents = 200
)

// invalidSpec turns a validation error into an application error whose
// message lists every problem and whose details carry them, so a client
// (the REST gateway) can show each with its path.
func invalidSpec(err error) error {
	var ve *schema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	msgs := make([]string, len(ve.Problems))
	for i, p := range ve.Problems {
		msgs[i] = p.Path + ": " + p.Message
	}
	return temporal.NewNonRetryableApplicationError("invalid endpoint spec: "+strings.Join(msgs, "; "),
		activities.ErrTypeInvalidEndpointSpec, nil, ve.Problems)
}

// errNoRollout answers a promote or abort when nothing rolls out.
var errNoRollout = errors.New("no rollout is in progress")

// endpoint is the workflow's state and behaviour.
type endpoint struct {
	in    activities.EndpointInput
	st    *activities.EndpointState
	woken bool // an update changed something: decide now, not at the tick
}

// Workflow owns one inference endpoint: it is the only writer of
// its replicas and traffic weights. Every tick it observes the revisions
// (activities.ObserveEndpointName), asks the autoscaler for the replicas
// the endpoint needs and, while a rollout runs, the rollout for its next
// step, then applies the resulting layout when it changed. Updates create
// revisions (inference.NextRevision) and start rollouts; the query serves
// the state and its events. It continues as new before its history grows
// large, carrying its state.
func Workflow(ctx workflow.Context, in activities.EndpointInput) error {
	e := &endpoint{in: in, st: in.State}
	if in.Tick <= 0 {
		e.in.Tick = DefaultTick
	}
	if e.st == nil {
		st, err := firstState(workflow.Now(ctx), in.Spec)
		if err != nil {
			return invalidSpec(err)
		}
		e.st = st
		e.event(ctx, "RevisionCreated", 1, "revision 1 created")
		e.event(ctx, "RolloutStarted", 1, "rolling out revision 1")
	}
	if err := e.handlers(ctx); err != nil {
		return err
	}
	traffic := workflow.GetSignalChannel(ctx, activities.SignalEndpointTraffic)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var t activities.EndpointTraffic
			traffic.Receive(ctx, &t)
			e.onTraffic(ctx, t)
		}
	})
	moved := workflow.GetSignalChannel(ctx, activities.SignalEndpointModelMoved)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var m activities.ModelMoved
			moved.Receive(ctx, &m)
			e.onModelMoved(m)
		}
	})
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:           e.in.TaskQueue,
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
	})
	for {
		if e.st.Deleting {
			return e.delete(ctx, actx)
		}
		if e.st.ModelMoved && e.st.Rollout == nil && !workflow.Now(ctx).Before(e.st.FollowAfter) {
			e.followModel(ctx)
		}
		if err := e.tick(ctx, actx); err != nil {
			return err
		}
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > endpointHistoryLimit {
			_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
			// Reports not yet received would be lost with this run.
			for t := (activities.EndpointTraffic{}); traffic.ReceiveAsync(&t); t = (activities.EndpointTraffic{}) {
				e.onTraffic(ctx, t)
			}
			for m := (activities.ModelMoved{}); moved.ReceiveAsync(&m); m = (activities.ModelMoved{}) {
				e.onModelMoved(m)
			}
			next := e.in
			next.State = e.st
			return workflow.NewContinueAsNewError(ctx, activities.EndpointWorkflowName, next)
		}
		e.woken = false
		_, _ = workflow.AwaitWithTimeout(ctx, e.in.Tick, func() bool { return e.woken })
	}
}

func firstState(now time.Time, spec inference.EndpointSpec) (*activities.EndpointState, error) {
	rev, _, err := inference.NextRevision(nil, spec, now)
	if err != nil {
		return nil, err
	}
	ro := inference.NewRollout(nil, rev)
	return &activities.EndpointState{
		Revisions: []inference.Revision{rev}, Current: 1, Rollout: &ro,
		Scaler: inference.Autoscaler{Config: inference.AutoscalerConfigFor(rev.Spec)},
	}, nil
}

// handlers registers the query and the updates.
func (e *endpoint) handlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, activities.QueryEndpointStatus, func() (activities.EndpointStatus, error) {
		return activities.EndpointStatus{Project: e.in.Project, Name: e.in.Name, TaskQueue: e.in.TaskQueue, EndpointState: *e.st}, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, activities.UpdateEndpointSpec,
		func(ctx workflow.Context, spec inference.EndpointSpec) (inference.Revision, error) {
			rev, made, _ := inference.NextRevision(e.latest(), spec, workflow.Now(ctx))
			if made {
				e.adopt(ctx, rev, "RevisionCreated", fmt.Sprintf("revision %d created", rev.Number))
			}
			return rev, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, spec inference.EndpointSpec) error {
			if e.st.Deleting {
				return errors.New("the endpoint is being deleted")
			}
			rev, made, err := inference.NextRevision(e.latest(), spec, workflow.Now(ctx))
			if err != nil {
				return invalidSpec(err)
			}
			return e.canAdopt(rev, made)
		}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, activities.UpdateEndpointRollback,
		func(ctx workflow.Context, to int) (inference.Revision, error) {
			rev, made, _ := inference.Rollback(e.st.Revisions, to, workflow.Now(ctx))
			if made {
				e.adopt(ctx, rev, "RevisionCreated", fmt.Sprintf("revision %d created: rollback to revision %d", rev.Number, to))
			}
			return rev, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, to int) error {
			if e.st.Deleting {
				return errors.New("the endpoint is being deleted")
			}
			rev, made, err := inference.Rollback(e.st.Revisions, to, workflow.Now(ctx))
			if err != nil {
				return err
			}
			return e.canAdopt(rev, made)
		}}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, activities.UpdateEndpointCommand,
		func(ctx workflow.Context, c activities.EndpointCommand) (activities.EndpointStatus, error) {
			e.st.Command = c.Command
			e.event(ctx, "Command", e.st.Rollout.Candidate, string(c.Command)+" requested")
			e.woken = true
			return activities.EndpointStatus{Project: e.in.Project, Name: e.in.Name, EndpointState: *e.st}, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, c activities.EndpointCommand) error {
			if c.Command != inference.CommandPromote && c.Command != inference.CommandAbort {
				return fmt.Errorf("unknown command %q: use %q or %q", c.Command, inference.CommandPromote, inference.CommandAbort)
			}
			if e.st.Rollout == nil {
				return errNoRollout
			}
			return nil
		}}); err != nil {
		return err
	}
	return workflow.SetUpdateHandler(ctx, activities.UpdateEndpointDelete, func(ctx workflow.Context) error {
		if !e.st.Deleting {
			e.st.Deleting = true
			e.event(ctx, "Deleting", 0, "deletion requested")
			e.woken = true
		}
		return nil
	})
}

// onModelMoved marks the endpoint for a new resolution when its latest
// revision follows the alias that moved (signals about other aliases, sent
// to every endpoint of the project, are ignored).
func (e *endpoint) onModelMoved(m activities.ModelMoved) {
	l := e.latest()
	if l == nil || e.st.Deleting {
		return
	}
	if r := l.Spec.Model.Registered; l.Spec.Model.Follow && r != nil && r.Model == m.Model && r.Alias == m.Alias {
		e.st.ModelMoved = true
		e.woken = true
	}
}

// followModel resolves the followed alias again and, when it names
// another version than the latest revision serves, makes a revision
// serving that version (rolled out as any new revision: canary, gates).
// An alias that no longer resolves (removed) leaves the endpoint serving
// what it serves, with an event saying why. It runs with no rollout in
// progress, so the new revision can always be adopted; the resolution is
// an activity on the control queue of the workflow's own (a local
// worker's, next to the catalogue), where long steps cannot hold it up.
//
// ModelMoved is cleared before the resolution, so a move heard while it
// runs asks for another: the last resolution always follows the last
// move. A resolution that fails is tried again after followRetry, the
// tick loop going on meanwhile.
func (e *endpoint) followModel(ctx workflow.Context) {
	l := e.latest()
	if m := l.Spec.Model; !m.Follow || m.Registered == nil {
		// The latest revision stopped following since the move was heard.
		e.st.ModelMoved = false
		return
	}
	if workflow.GetVersion(ctx, changeFollowModel, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		e.st.ModelMoved = false // recorded before following existed: cannot happen
		return
	}
	e.st.ModelMoved = false
	// The activity also records the endpoint's reference to the version
	// it answers before the revision serving it is made: the input
	// changes, the commands do not.
	req := activities.ResolveEndpointModelRequest{Project: e.in.Project, Model: l.Spec.Model, Endpoint: e.in.Name}
	rctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              activities.ControlTaskQueue(workflow.GetInfo(ctx).TaskQueueName),
		StartToCloseTimeout:    10 * time.Second,
		ScheduleToCloseTimeout: 30 * time.Second,
		RetryPolicy:            &temporal.RetryPolicy{MaximumInterval: 5 * time.Second},
	})
	var res activities.ResolveEndpointModelResult
	if err := workflow.ExecuteActivity(rctx, activities.ResolveEndpointModelName, req).Get(ctx, &res); err != nil {
		workflow.GetLogger(ctx).Warn("cannot resolve the followed model", "error", err)
		e.st.ModelMoved, e.st.FollowAfter = true, workflow.Now(ctx).Add(followRetry)
		return
	}
	if e.latest().Number != l.Number || e.st.Rollout != nil || e.st.Deleting {
		e.st.ModelMoved = true // changed meanwhile: resolve for the new latest once it may change
		return
	}
	cur := l.Spec.Model.Registered
	reg := res.Model.Registered
	switch {
	case res.Problem != "":
		e.event(ctx, "ModelNotFollowed", l.Number, fmt.Sprintf("%s: %s; still serving version %d", l.Spec.Model.Ref, res.Problem, cur.Version))
		return
	case reg == nil || reg.Version == cur.Version:
		return
	}
	spec := l.Spec
	spec.Model = res.Model
	rev, made, err := inference.NextRevision(l, spec, workflow.Now(ctx))
	if err != nil || !made {
		return
	}
	e.adopt(ctx, rev, "RevisionCreated", fmt.Sprintf("revision %d created: %s moved from version %d to %d",
		rev.Number, l.Spec.Model.Ref, cur.Version, reg.Version))
}

// followRetry is how long a failed resolution of a followed alias waits
// before the next try.
const followRetry = 30 * time.Second

// changeFollowModel guards following a model alias (GetVersion).
const changeFollowModel = "atelier.endpoint-follow-model"

func (e *endpoint) latest() *inference.Revision {
	if len(e.st.Revisions) == 0 {
		return nil
	}
	return &e.st.Revisions[len(e.st.Revisions)-1]
}

func (e *endpoint) revision(n int) *inference.Revision {
	for i := range e.st.Revisions {
		if e.st.Revisions[i].Number == n {
			return &e.st.Revisions[i]
		}
	}
	return nil
}

// canAdopt refuses a revision that changes what replicas run while a
// rollout is in progress: the user promotes or aborts it first, so two
// rollouts never race for the same replicas.
func (e *endpoint) canAdopt(rev inference.Revision, made bool) error {
	if !made || e.st.Rollout == nil {
		return nil
	}
	if rev.NeedsRollout(*e.revision(e.st.Rollout.Candidate)) {
		return fmt.Errorf("revision %d is still rolling out: promote or abort it before changing what replicas run", e.st.Rollout.Candidate)
	}
	return nil
}

// adopt records a new revision: one that changes what replicas run starts
// a rollout; one that changes only replicas, autoscaling or rollout
// settings applies in place.
func (e *endpoint) adopt(ctx workflow.Context, rev inference.Revision, kind, msg string) {
	e.st.Revisions = append(e.st.Revisions, rev)
	e.st.Current = rev.Number
	e.event(ctx, kind, rev.Number, msg)
	e.st.Scaler.Config = inference.AutoscalerConfigFor(rev.Spec)
	switch {
	case e.st.Rollout != nil:
		// Only settings changed (canAdopt): the rollout goes on.
	case e.st.Stable == 0 || rev.NeedsRollout(*e.revision(e.st.Stable)):
		var stable *inference.Revision
		if e.st.Stable != 0 {
			stable = e.revision(e.st.Stable)
		}
		ro := inference.NewRollout(stable, rev)
		e.st.Rollout = &ro
		e.event(ctx, "RolloutStarted", rev.Number, fmt.Sprintf("rolling out revision %d (%s)", rev.Number, ro.Settings.Strategy))
	}
	// Otherwise the serving replicas stay (same template) and the new
	// settings apply from the next tick.
	e.woken = true
}

// tick observes, decides and applies once.
func (e *endpoint) tick(ctx, actx workflow.Context) error {
	revs := e.serving()
	if len(revs) == 0 {
		return nil // a first revision was rolled back: nothing serves until an update
	}
	req := activities.ObserveEndpointRequest{EndpointRef: e.ref(), Backend: e.latest().Spec.Backend, Revisions: revs}
	if e.st.Rollout != nil && e.st.LastStep != nil && !e.st.LastStep.MeasureFrom.IsZero() {
		req.Measured, req.MeasureFrom, req.Probes = e.st.Rollout.Candidate, e.st.LastStep.MeasureFrom, e.st.LastStep.Probes
		if c := e.revision(e.st.Rollout.Candidate); c != nil && req.Probes > 0 {
			req.ProbeModel = c.Spec.Model.Served()
		}
	}
	var obs activities.ObserveEndpointResult
	if err := workflow.ExecuteActivity(actx, activities.ObserveEndpointName, req).Get(ctx, &obs); err != nil {
		// Observing failed even after retries: keep the layout, try at the
		// next tick. The autoscaler treats missing data as unknown.
		workflow.GetLogger(ctx).Warn("cannot observe the endpoint", "error", err)
		return nil
	}
	e.st.Observed = obs.Revisions
	now := workflow.Now(ctx)
	if w := e.st.Window; w != nil && req.Measured == w.Revision && req.MeasureFrom.Equal(w.From) {
		// Synthetic probes count as the window's traffic, as the gates
		// expect ("synthetic probes included").
		if p := observed(obs, w.Revision).Probed; p != nil {
			w.Add(*p)
		}
	}

	// The autoscaler sizes what serves: the stable revision, or the
	// candidate of a first rollout.
	sized := e.st.Stable
	if sized == 0 && e.st.Rollout != nil {
		sized = e.st.Rollout.Candidate
	}
	o := observed(obs, sized)
	queue := slices.Clone(o.Queue)
	held := obs.Held
	if !e.st.HeldAt.IsZero() && now.Sub(e.st.HeldAt) < heldFresh*e.in.Tick {
		held = max(held, e.st.Held)
	}
	if held > 0 || o.Replicas == 0 {
		queue = append(queue, inference.Observation{At: obs.At, Source: inference.SourceProxy,
			Signal: inference.QueueSignal{Waiting: float64(held), Known: true}})
	}
	d := e.st.Scaler.Decide(now, queue, inference.Replicas{Current: e.replicasOf(sized), Ready: o.Status.Ready})
	if e.st.LastScale == nil || e.st.LastScale.Desired != d.Desired {
		e.event(ctx, "ScaleDecided", sized, fmt.Sprintf("%d replica(s): %s", d.Desired, d.Message()))
	}
	e.st.LastScale = &d
	e.gauges(ctx, d.Desired, e.readyServing())

	var step inference.RolloutStep
	if ro := e.st.Rollout; ro != nil && ro.Candidate != e.st.QuotaChecked {
		e.checkQuota(ctx, actx, ro, d.Desired)
	}
	if ro := e.st.Rollout; ro != nil {
		in := inference.RolloutInput{Now: now, Target: d.Desired, Candidate: observed(obs, ro.Candidate).Status, Command: e.st.Command}
		if w := e.st.Window; w != nil && w.Revision == ro.Candidate && !in.Candidate.MetricsKnown {
			// The runtime's own figures, when it has some, win: the
			// proxy sees only the requests that pass through the gateway.
			in.Candidate = w.Status(in.Candidate)
		}
		if ro.Stable != 0 {
			in.Stable = observed(obs, ro.Stable).Status
		}
		e.st.Command = inference.CommandNone
		step = ro.Next(in)
		if e.st.LastStep == nil || e.st.LastStep.Stage != step.Stage || e.st.LastStep.Action != step.Action {
			e.event(ctx, "Rollout"+string(step.Action), ro.Candidate, fmt.Sprintf("%s: %s", step.Stage, step.Reason))
		}
	} else {
		step = inference.RolloutStep{Action: inference.ActionProgress,
			Replicas: []inference.RevisionReplicas{{Revision: e.st.Stable, Replicas: d.Desired}},
			Traffic:  []inference.RevisionWeight{{Revision: e.st.Stable, Weight: 100}}}
	}
	e.st.LastStep = &step
	e.measure()
	if err := e.apply(ctx, actx, step); err != nil {
		return err
	}
	return e.settle(ctx, actx, step)
}

// heldFresh: a held count older than this many ticks is stale (the
// proxy reports every second while it holds requests, and zero when it
// stops, so only a gateway that died while holding leaves one behind).
const heldFresh = 3

// onTraffic takes a gateway proxy's report: requests held while no replica
// is ready wake the loop at once (the 0→1 path does not wait for a tick),
// and the rollout candidate's requests add to the window its gates judge.
func (e *endpoint) onTraffic(ctx workflow.Context, t activities.EndpointTraffic) {
	e.st.Held, e.st.HeldAt = max(t.Held, 0), workflow.Now(ctx)
	if t.Held > 0 && e.readyServing() == 0 {
		e.woken = true
	}
	if w := e.st.Window; w != nil {
		for _, r := range t.Revisions {
			if r.Revision == w.Revision {
				w.Add(r)
			}
		}
	}
}

// readyServing counts the ready replicas of the last observation.
func (e *endpoint) readyServing() int {
	n := 0
	for _, o := range e.st.Observed {
		n += o.Status.Ready
	}
	return n
}

// measure starts a new traffic window when the rollout's step starts
// measuring afresh (a new canary weight, a new preview), and drops it
// when nothing is measured.
func (e *endpoint) measure() {
	ro, step := e.st.Rollout, e.st.LastStep
	if ro == nil || step == nil || step.MeasureFrom.IsZero() {
		e.st.Window = nil
		return
	}
	if w := e.st.Window; w == nil || w.Revision != ro.Candidate || !w.From.Equal(step.MeasureFrom) {
		e.st.Window = &inference.TrafficWindow{Revision: ro.Candidate, From: step.MeasureFrom}
	}
}

// checkQuota checks, once per rollout before its first step, that the
// candidate's GPUs fit the project's quota headroom where it runs. A plan
// that does not fit is aborted before it creates anything, saying by how
// much and which surge-free plan would fit (inference.CheckQuota); the
// stable revision keeps serving. A headroom that cannot be read does not
// block the rollout: admission of the pods is then the cluster's.
func (e *endpoint) checkQuota(ctx, actx workflow.Context, ro *inference.Rollout, target int) {
	e.st.QuotaChecked, e.st.Quota = ro.Candidate, nil
	cand := e.revision(ro.Candidate)
	if cand == nil || cand.Spec.Resources.GPUs == 0 {
		return
	}
	if workflow.GetVersion(ctx, "atelier.endpoint-gpu-quota", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	var h activities.EndpointHeadroom
	if err := workflow.ExecuteActivity(actx, activities.EndpointHeadroomName, e.ref()).Get(ctx, &h); err != nil {
		e.event(ctx, "QuotaUnknown", ro.Candidate, "cannot read the project's GPU headroom, rolling out unchecked: "+err.Error())
		return
	}
	if !h.Limited {
		return
	}
	var stable *inference.Revision
	if ro.Stable != 0 {
		stable = e.revision(ro.Stable)
	}
	q := inference.CheckQuota(stable, *cand, target, h.Headroom)
	e.st.Quota = &q
	if q.Fits {
		e.event(ctx, "QuotaChecked", ro.Candidate, q.Message())
		return
	}
	e.event(ctx, "RolloutExceedsQuota", ro.Candidate, q.Message())
	e.st.Command = inference.CommandAbort
}

// serving lists the deployment revisions that may have replicas.
func (e *endpoint) serving() []int {
	var out []int
	if e.st.Stable != 0 {
		out = append(out, e.st.Stable)
	}
	if ro := e.st.Rollout; ro != nil && ro.Candidate != e.st.Stable {
		out = append(out, ro.Candidate)
	}
	return out
}

// apply writes the step's layout when it differs from the last applied.
func (e *endpoint) apply(ctx, actx workflow.Context, step inference.RolloutStep) error {
	if len(step.Replicas) == 0 || (slices.Equal(step.Replicas, e.st.Replicas) && slices.Equal(step.Traffic, e.st.Traffic)) {
		return nil
	}
	req := activities.ApplyEndpointLayoutRequest{EndpointRef: e.ref(), Traffic: step.Traffic, ScaleDownFirst: step.ScaleDownFirst}
	for _, r := range step.Replicas {
		rev := e.revision(r.Revision)
		if rev == nil {
			continue
		}
		req.Revisions = append(req.Revisions, activities.RevisionLayout{Revision: r.Revision, Spec: rev.Spec, Replicas: r.Replicas})
	}
	var res activities.ApplyEndpointLayoutResult
	if err := workflow.ExecuteActivity(actx, activities.ApplyEndpointLayoutName, req).Get(ctx, &res); err != nil {
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.NonRetryable() && e.st.Rollout != nil {
			// The runtime refuses the candidate (e.g. an invalid image
			// spec): the rollout fails, the stable revision keeps serving.
			e.event(ctx, "RolloutRolledBack", e.st.Rollout.Candidate, "the runtime refused the revision: "+appErr.Message())
			e.st.Command = inference.CommandAbort
			return nil
		}
		workflow.GetLogger(ctx).Warn("cannot apply the endpoint's layout; retrying at the next tick", "error", err)
		return nil
	}
	e.st.Replicas, e.st.Traffic, e.st.TrafficMode = step.Replicas, step.Traffic, res.TrafficMode
	return nil
}

// settle ends a finished rollout: the winner becomes the stable revision
// and the loser's replicas are deleted.
func (e *endpoint) settle(ctx, actx workflow.Context, step inference.RolloutStep) error {
	ro := e.st.Rollout
	if ro == nil || (step.Action != inference.ActionPromote && step.Action != inference.ActionRollBack && step.Action != inference.ActionDone) {
		return nil
	}
	loser := ro.Stable
	if step.Action == inference.ActionRollBack || (step.Action == inference.ActionDone && ro.State.Final != nil && ro.State.Final.Action == inference.ActionRollBack) {
		loser = ro.Candidate
	} else {
		e.st.Stable = ro.Candidate
	}
	e.st.Rollout = nil
	if loser != 0 && loser != e.st.Stable {
		err := workflow.ExecuteActivity(actx, activities.DeleteEndpointRevisionsName,
			activities.DeleteEndpointRevisionsRequest{EndpointRef: e.ref(), Revisions: []int{loser}}).Get(ctx, nil)
		if err != nil {
			workflow.GetLogger(ctx).Warn("cannot delete a finished rollout's other revision", "revision", loser, "error", err)
		}
		e.st.Replicas = slices.DeleteFunc(e.st.Replicas, func(r inference.RevisionReplicas) bool { return r.Revision == loser })
	}
	e.woken = true // the steady state takes over at once
	return nil
}

// delete removes everything and ends the workflow.
func (e *endpoint) delete(ctx, actx workflow.Context) error {
	err := workflow.ExecuteActivity(actx, activities.DeleteEndpointName, e.ref()).Get(ctx, nil)
	if err != nil {
		return fmt.Errorf("delete endpoint %s/%s: %w", e.in.Project, e.in.Name, err)
	}
	e.event(ctx, "Deleted", 0, "endpoint deleted")
	e.gauges(ctx, 0, 0)
	return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
}

// gauges publishes the replica counts (telemetry.EndpointReplicasDesired,
// …Ready) through the replay-safe metrics handler; no command.
func (e *endpoint) gauges(ctx workflow.Context, desired, ready int) {
	h := workflow.GetMetricsHandler(ctx).WithTags(map[string]string{"endpoint": e.in.Project + "/" + e.in.Name})
	h.Gauge(telemetry.MetricEndpointReplicasDesired).Update(float64(desired))
	h.Gauge(telemetry.MetricEndpointReplicasReady).Update(float64(ready))
}

func (e *endpoint) ref() activities.EndpointRef {
	return activities.EndpointRef{Project: e.in.Project, Endpoint: e.in.Name}
}

func (e *endpoint) replicasOf(rev int) int {
	for _, r := range e.st.Replicas {
		if r.Revision == rev {
			return r.Replicas
		}
	}
	return 0
}

func (e *endpoint) event(ctx workflow.Context, kind string, rev int, msg string) {
	e.st.Events = append(e.st.Events, activities.EndpointEvent{At: workflow.Now(ctx), Kind: kind, Revision: rev, Message: msg})
	if n := len(e.st.Events); n > maxEndpointEvents {
		e.st.Events = slices.Delete(e.st.Events, 0, n-maxEndpointEvents)
	}
}

// observed finds revision rev in an observation (zero value: nothing
// observed, e.g. not created yet).
func observed(obs activities.ObserveEndpointResult, rev int) activities.RevisionObservation {
	for _, r := range obs.Revisions {
		if r.Revision == rev {
			return r
		}
	}
	return activities.RevisionObservation{Revision: rev}
}
