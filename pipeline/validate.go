package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/schema"
)

// ValidateOptions describes the runtime a pipeline is validated for, so a
// spec that is well-formed but cannot run there is rejected when it is
// submitted rather than when a step is reached.
type ValidateOptions struct {
	// Kinds lists the step kinds the target runtime can run. The local
	// runtime passes only KindContainer; nil means the same, the one kind
	// every runtime supports. With a Kubernetes cluster registered the
	// gateway passes container, ray, spark and inference.
	Kinds []StepKind
	// Kubernetes reports that at least one Kubernetes cluster is registered,
	// so placement (pipeline, step and shared Ray cluster) can be honoured.
	// It is implied when Kinds holds a kind that only runs on a cluster
	// (ray, spark); set it for a cluster that runs container steps only.
	// Without a cluster, ray and spark steps are rejected with a message
	// saying a Kubernetes cluster is needed, and so is placement.
	Kubernetes bool
	// LocalEndpoints reports that the local runtime serves inference
	// endpoints, so an inference step may leave inference.cluster empty to
	// run its endpoint there. Without it, inference.cluster must name a
	// registered cluster.
	LocalEndpoints bool
}

// kubernetes reports whether a Kubernetes cluster is available.
func (o ValidateOptions) kubernetes() bool {
	if o.Kubernetes {
		return true
	}
	for _, k := range o.Kinds {
		if clusterKind[k] {
			return true
		}
	}
	return false
}

// vctx is what validating one part of a pipeline needs to know about the
// rest and about the target runtime.
type vctx struct {
	kinds []StepKind
	kube  bool
	// localEndpoints: an inference step may leave its cluster empty.
	localEndpoints bool
	// rayClusters maps each named entry of Pipeline.RayClusters to its
	// index (first occurrence).
	rayClusters map[string]int
	// section is the list being validated: "steps", or "onExit" for exit
	// handlers (onexit.go); "" means "steps".
	section string
}

// stepsPath is the path of the list vc validates.
func (vc *vctx) stepsPath() string {
	if vc.section == "" {
		return "steps"
	}
	return vc.section
}

// MaxStepTimeout bounds Step.Timeout: longer attempts would outlive
// reasonable worker heartbeats and history retention.
const MaxStepTimeout = 7 * 24 * time.Hour

var (
	stepNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	paramTypes = []ParamType{ParamString, ParamInteger, ParamNumber, ParamBoolean, ParamObject, ParamArray}
	stepKinds  = []StepKind{KindContainer, KindRay, KindSpark, KindInference, KindApproval, KindPipeline, KindPromote}
	// clusterKind: kinds only a Kubernetes cluster runs. Inference is not
	// one: a local runtime that serves endpoints runs it too.
	clusterKind = map[StepKind]bool{KindRay: true, KindSpark: true}
)

// Validate checks a parsed pipeline and returns a *ValidationError listing
// every problem found, each with its path, so a user fixes a spec in one
// round trip. It checks names, kinds against opts, step configuration,
// dependencies and cycles (explicit dependsOn and implicit references to
// steps.<name>), expressions in when and forEach.items, templates in
// step templates, Kubernetes configuration (ray, spark, resources,
// placement, rayClusters), inference steps (endpoint name, cluster and the
// endpoint spec, whose problems come back with their paths under
// steps[i].inference.spec), pipeline steps (name and version; what needs
// the catalogue is CheckPipelineStep), the pipeline's outputs and limits. A nil error means the generic
// workflow can run the pipeline without meeting a spec error.
//
// Templated fields: container command, args, env values and workingDir; ray
// entrypoint and the string values inside runtimeEnv; spark
// mainApplicationFile, arguments and sparkConf values; inference endpoint
// and every string of its spec; pipeline params; the pipeline's outputs
// (where item is not available). Where item may be used: only in those
// templates, of a step with forEach. when is evaluated
// once per step (before fan-out) and forEach.items defines the items, so
// item is rejected in both.
func Validate(p *Spec, opts ValidateOptions) error {
	var ps problems
	if p == nil {
		ps.add("", "pipeline is missing")
		return ps.err()
	}
	vc := &vctx{kinds: opts.Kinds, kube: opts.kubernetes(), localEndpoints: opts.LocalEndpoints, rayClusters: map[string]int{}}
	if len(vc.kinds) == 0 {
		vc.kinds = []StepKind{KindContainer}
	}

	checkPod("pod", p.Pod, &ps)
	if p.Deadline < 0 {
		ps.add("deadline", "must not be negative")
	}

	sc := &refScope{params: map[string]bool{}, steps: map[string]int{}}
	validateParams(p, &ps, sc)

	if p.Placement != nil {
		validatePlacement("placement", p.Placement, &ps)
		if !vc.kube {
			ps.add("placement", "placement needs a Kubernetes cluster; the local runtime runs every step locally")
		}
	}
	validateRayClusters(p, vc, &ps)
	if p.Cache != nil {
		validateCache("cache", p.Cache, &ps)
	}

	if len(p.Steps) == 0 {
		ps.add("steps", "a pipeline needs at least one step")
	}
	switch n := len(p.Steps) + len(p.OnExit); {
	case n > MaxSteps && len(p.OnExit) > 0:
		ps.add("steps", "%d steps, onExit included; the limit is %d", n, MaxSteps)
	case n > MaxSteps:
		ps.add("steps", "%d steps; the limit is %d", n, MaxSteps)
	}
	for i, s := range p.Steps {
		path := index("steps", i)
		switch {
		case s.Name == "":
			ps.add(field(path, "name"), "required")
		case !stepNameRE.MatchString(s.Name):
			ps.add(field(path, "name"), "invalid step name %q: use lowercase letters, digits and '-', starting with a letter, at most 63 characters", s.Name)
		}
		if s.Name == "" {
			continue
		}
		if j, dup := sc.steps[s.Name]; dup {
			ps.add(field(path, "name"), "duplicate step name %q (also steps[%d])", s.Name, j)
			continue
		}
		sc.steps[s.Name] = i
	}
	for i := range p.Steps {
		validateStep(p, i, vc, sc, &ps)
	}
	validateOutputs(p, sc, &ps)
	validateExports(p, &ps)
	reportCycles(p, "steps", &ps)
	validateOnExit(p, vc, sc, &ps)
	if n := EstimateHistoryEvents(p); n > MaxEstimatedHistoryEvents {
		ps.add("steps", "a run of this pipeline needs about %d Temporal history events when every step succeeds the first time; Temporal allows 51,200 per run (Atelier plans for at most %d): use fewer steps or forEach items, or split the pipeline", n, MaxEstimatedHistoryEvents)
	}

	sortProblems(ps.list)
	return ps.err()
}

func validateParams(p *Spec, ps *problems, sc *refScope) {
	seen := map[string]int{}
	for i, prm := range p.Params {
		path := index("params", i)
		switch {
		case prm.Name == "":
			ps.add(field(path, "name"), "required")
		case !identRE.MatchString(prm.Name):
			ps.add(field(path, "name"), "invalid param name %q: use letters, digits and '_', not starting with a digit", prm.Name)
		}
		if prm.Name != "" {
			if j, dup := seen[prm.Name]; dup {
				ps.add(field(path, "name"), "duplicate param name %q (also params[%d])", prm.Name, j)
			} else {
				seen[prm.Name] = i
				sc.params[prm.Name] = true
			}
		}
		known := false
		for _, t := range paramTypes {
			if prm.Type == t {
				known = true
			}
		}
		switch {
		case prm.Type == "":
			ps.add(field(path, "type"), "required; use one of %s", joinParamTypes())
		case !known:
			ps.add(field(path, "type"), "unknown type %q; use one of %s", prm.Type, joinParamTypes())
		case prm.Default != nil:
			if msg := valueTypeError(prm.Type, prm.Default); msg != "" {
				ps.add(field(path, "default"), "%s", msg)
			}
		}
	}
}

func joinParamTypes() string {
	s := make([]string, len(paramTypes))
	for i, t := range paramTypes {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}

func joinKinds(ks []StepKind) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// article is the indefinite article before a kind's name.
func article(k StepKind) string {
	if k != "" && strings.ContainsRune("aeiou", rune(k[0])) {
		return "an"
	}
	return "a"
}

func hasKind(ks []StepKind, k StepKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

func validateStep(p *Spec, i int, vc *vctx, psc *refScope, ps *problems) {
	s := &p.Steps[i]
	path := index(vc.stepsPath(), i)
	sc := *psc
	sc.self = s.Name
	kinds := vc.kinds

	kind := s.Kind
	if kind == "" {
		kind = KindContainer
	}
	known := hasKind(stepKinds, kind)
	switch {
	case !known:
		ps.add(field(path, "kind"), "unknown step kind %q; use one of %s", kind, joinKinds(stepKinds))
	case hasKind(kinds, kind) || kind == KindApproval || kind == KindPipeline || kind == KindPromote:
		// Approval, pipeline and promote steps need no runtime: the
		// workflow itself waits, starts the child run, or moves the alias.
	case clusterKind[kind] && !vc.kube:
		ps.add(field(path, "kind"), "step kind %q needs a Kubernetes cluster; the local runtime runs only container steps", kind)
	case kind == KindInference && !vc.kube:
		ps.add(field(path, "kind"), "step kind %q needs a Kubernetes cluster to run its endpoint; the local runtime here does not serve inference endpoints", kind)
	default:
		ps.add(field(path, "kind"), "step kind %q is not supported by this runtime (it runs %s)", kind, joinKinds(kinds))
	}

	// Kind-specific configuration: exactly the block of the step's kind.
	// An unknown kind already has its problem; guessing which block it
	// meant would only add noise.
	if known {
		for _, c := range []struct {
			kind StepKind
			set  bool
		}{
			{KindContainer, s.Container != nil},
			{KindRay, s.Ray != nil},
			{KindSpark, s.Spark != nil},
			{KindInference, s.Inference != nil},
			{KindApproval, s.Approval != nil},
			{KindPipeline, s.Pipeline != nil},
			{KindPromote, s.Promote != nil},
		} {
			f := field(path, string(c.kind))
			switch {
			case c.set && kind != c.kind:
				ps.add(f, "only %s steps may set %s (this step's kind is %s)", c.kind, c.kind, kind)
			case !c.set && kind == c.kind && kind != KindContainer && kind != KindApproval && hasKind(kinds, kind):
				ps.add(f, "required for %s %s step", article(kind), kind)
			}
		}
	}
	if kind == KindContainer {
		switch {
		case s.Container == nil:
			ps.add(field(path, "container"), "required for a container step (at least container.command)")
		case len(s.Container.Command) == 0:
			ps.add(field(path, "container.command"), "must not be empty")
		}
	}

	// dependsOn.
	seenDep := map[string]int{}
	for j, d := range s.DependsOn {
		dp := index(field(path, "dependsOn"), j)
		if k, dup := seenDep[d]; dup {
			ps.add(dp, "duplicate dependency %q (also dependsOn[%d])", d, k)
			continue
		}
		seenDep[d] = j
		switch _, ok := sc.steps[d]; {
		case d == s.Name:
			ps.add(dp, "a step cannot depend on itself")
		case !ok && sc.outer[d]:
			ps.add(dp, "onExit steps start once every step of the pipeline has ended; dependsOn may name only other onExit steps (read %q's outputs in a template instead)", d)
		case !ok:
			msg := fmt.Sprintf("unknown step %q", d)
			if sg := suggest(d, stepNamesSorted(sc.steps)); sg != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", sg)
			}
			ps.add(dp, "%s", msg)
		}
	}

	validateRunIf(path, s, ps)
	if s.ContinueOn != "" && s.ContinueOn != ContinueOnFailed {
		ps.add(field(path, "continueOn"), "unknown continueOn %q; the only one is %q", s.ContinueOn, ContinueOnFailed)
	}
	if c := s.Cache; c != nil {
		cp := field(path, "cache")
		switch kind {
		case KindApproval:
			ps.add(cp, "an approval step waits for a person's decision in every run; it cannot be cached")
		case KindInference:
			ps.add(cp, "an inference step deploys an endpoint that lives outside the run; reusing an earlier deploy would skip it, so it cannot be cached")
		case KindPipeline:
			ps.add(cp, "a pipeline step starts a child run; it cannot be cached itself: set cache on the child pipeline's steps")
		case KindPromote:
			ps.add(cp, "a promote step moves an alias, which lives outside the run; reusing an earlier move would skip it, so it cannot be cached")
		default:
			validateCache(cp, c, ps)
		}
	}
	if kind == KindApproval {
		validateApproval(path, s, ps)
	}
	if kind == KindPipeline {
		validatePipelineStep(path, s, ps)
	}
	if kind == KindPromote {
		validatePromote(path, s, &sc, p.Steps, ps)
	}

	// when.
	if strings.TrimSpace(s.When) != "" {
		wsc := sc
		wsc.itemOK = false
		wsc.itemWhy = "item is not available in when: when is evaluated once for the whole step, before forEach fans out (forEach.when is evaluated per item)"
		if strings.Contains(s.When, "{{") {
			ps.add(field(path, "when"), "write when as a plain expression, without {{ }}")
		} else {
			_, msgs := checkExpr(s.When, modeBool, &wsc)
			for _, m := range msgs {
				ps.add(field(path, "when"), "%s", m)
			}
		}
	}

	// forEach.
	if fe := s.ForEach; fe != nil {
		fp := field(path, "forEach")
		isc := sc
		isc.itemOK = false
		isc.itemWhy = "item is not available in forEach.items, which defines the items"
		validateItems(fe.Items, field(fp, "items"), &isc, ps)
		if strings.TrimSpace(fe.When) != "" {
			if strings.Contains(fe.When, "{{") {
				ps.add(field(fp, "when"), "write forEach.when as a plain expression, without {{ }}")
			} else {
				wsc := sc
				wsc.itemOK = true // the condition is per item
				_, msgs := checkExpr(fe.When, modeBool, &wsc)
				for _, m := range msgs {
					ps.add(field(fp, "when"), "%s", m)
				}
			}
		}
		if fe.Parallelism < 0 || fe.Parallelism > MaxParallelism {
			ps.add(field(fp, "parallelism"), "must be between 0 and %d (0 means %d), got %d", MaxParallelism, DefaultParallelism, fe.Parallelism)
		}
		if fp := fe.FailurePolicy; fp != nil {
			pp := field(field(path, "forEach"), "failurePolicy")
			if fp.Mode != "" && fp.Mode != FailFast && fp.Mode != Continue {
				ps.add(field(pp, "mode"), "must be %q or %q, got %q", FailFast, Continue, fp.Mode)
			}
			if math.IsNaN(fp.MaxFailedPercent) || fp.MaxFailedPercent < 0 || fp.MaxFailedPercent > 100 {
				ps.add(field(pp, "maxFailedPercent"), "must be between 0 and 100, got %v", fp.MaxFailedPercent)
			}
		}
	}

	// metrics: the goals of what the step reports.
	for _, name := range sortedKeysOfGoals(s.Metrics) {
		mp := field(field(path, "metrics"), name)
		if why := MetricNameProblem(name); why != "" {
			ps.add(mp, "%s", why)
		}
		if g := s.Metrics[name]; g != Maximize && g != Minimize {
			ps.add(mp, "must be %q or %q, got %q", Maximize, Minimize, g)
		}
	}
	if len(s.Metrics) > 0 && kind != KindContainer {
		ps.add(field(path, "metrics"), "only container steps report metrics")
	}

	// retries.
	if r := s.Retries; r != nil {
		rp := field(path, "retries")
		if r.Limit < 0 || r.Limit > MaxRetries {
			ps.add(field(rp, "limit"), "must be between 0 and %d, got %d", MaxRetries, r.Limit)
		}
		if math.IsNaN(r.Factor) || math.IsInf(r.Factor, 0) || (r.Factor != 0 && r.Factor < 1) {
			ps.add(field(rp, "factor"), "must be at least 1 (or 0 for the default 2), got %v", r.Factor)
		}
		if r.Backoff < 0 {
			ps.add(field(rp, "backoff"), "must not be negative")
		}
		if r.MaxBackoff < 0 {
			ps.add(field(rp, "maxBackoff"), "must not be negative")
		}
		if r.Backoff > 0 && r.MaxBackoff > 0 && r.MaxBackoff < r.Backoff {
			ps.add(field(rp, "maxBackoff"), "must not be less than backoff (%s)", r.Backoff.D())
		}
	}

	// timeout.
	switch {
	case s.Timeout < 0:
		ps.add(field(path, "timeout"), "must not be negative")
	case s.Timeout.D() > MaxStepTimeout:
		ps.add(field(path, "timeout"), "%s is longer than the limit of %s", s.Timeout.D(), MaxStepTimeout)
	}

	// Templates (container, ray, spark, inference).
	tsc := sc
	tsc.itemOK = s.ForEach != nil
	tsc.itemWhy = "item is only available in steps with forEach"
	check := func(p, v string) {
		_, msgs := checkTemplate(v, &tsc)
		for _, m := range msgs {
			ps.add(p, "%s", m)
		}
	}
	if c := s.Container; c != nil {
		cp := field(path, "container")
		// A template in image picks an image per item or per parameter
		// (Argo's loops over maps); the rendered image is checked where the
		// step runs (an empty one fails the attempt, the API server judges
		// the rest).
		check(field(cp, "image"), c.Image)
		for j, v := range c.Command {
			if j == 0 && strings.TrimSpace(v) == "" {
				ps.add(index(field(cp, "command"), 0), "must not be empty")
			}
			check(index(field(cp, "command"), j), v)
		}
		for j, v := range c.Args {
			check(index(field(cp, "args"), j), v)
		}
		envNames := make([]string, 0, len(c.Env))
		for k := range c.Env {
			envNames = append(envNames, k)
		}
		sort.Strings(envNames)
		for _, k := range envNames {
			ep := key(field(cp, "env"), k)
			if k == "" || strings.ContainsAny(k, "=\x00") {
				ps.add(ep, "invalid environment variable name %q", k)
			}
			check(ep, c.Env[k])
		}
		if c.WorkingDir != "" {
			check(field(cp, "workingDir"), c.WorkingDir)
		}
		if c.Resources != nil {
			validateResources(field(cp, "resources"), c.Resources, ps)
		}
		validateSecrets(field(cp, "secrets"), c, ps)
		if a := c.Artifacts; a != nil {
			if s.EffectivePlacement(p) != nil && (len(a.Inputs) > 0 || len(a.Outputs) > 0) && len(c.Command) == 0 {
				ps.add(field(cp, "command"), "a step with artifacts on a Kubernetes cluster needs a command: the launcher that moves its artifacts runs it (the image's entrypoint is not known to Atelier)")
			}
			validateArtifacts(field(cp, "artifacts"), p, i, a, check, ps)
		}
		if c.Pod != nil {
			pp := field(cp, "pod")
			checkPod(pp, c.Pod, ps)
			if s.EffectivePlacement(p) == nil {
				ps.add(pp, "pod settings apply to steps placed on a Kubernetes cluster (placement); this step runs on the local runtime")
			}
		}
	}

	// Ray and spark: templates wherever the block is set (like container
	// templates); the rest only when it is the block of the step's kind and
	// the runtime runs that kind (otherwise the kind or the misplaced block
	// already has its problem, and the configuration, like a missing one,
	// is not the point).
	runnable := hasKind(kinds, kind)
	if r := s.Ray; r != nil {
		rp := field(path, "ray")
		if kind == KindRay && runnable {
			validateRay(rp, r, vc, ps)
		}
		if r.Artifacts != nil {
			validateArtifacts(field(rp, "artifacts"), p, i, r.Artifacts, check, ps)
		}
		rayTemplates(r, func(f, v string) { check(field(rp, f), v) })
	}
	if sp := s.Spark; sp != nil {
		spp := field(path, "spark")
		if kind == KindSpark && runnable {
			validateSpark(spp, sp, ps)
		}
		if sp.Artifacts != nil {
			validateArtifacts(field(spp, "artifacts"), p, i, sp.Artifacts, check, ps)
		}
		sparkTemplates(sp, func(f, v string) { check(field(spp, f), v) })
	}
	if a := s.Approval; a != nil && a.Message != "" {
		check(field(path, "approval.message"), a.Message)
	}
	if c := s.Pipeline; c != nil {
		cp := field(path, "pipeline")
		pipelineTemplates(c, func(f, v string) { check(field(cp, f), v) })
	}
	if pr := s.Promote; pr != nil {
		pp := field(path, "promote")
		promoteTemplates(pr, func(f, v string) { check(field(pp, f), v) })
	}
	if inf := s.Inference; inf != nil {
		ip := field(path, "inference")
		if kind == KindInference && runnable {
			validateInference(ip, inf, vc, ps)
		}
		inferenceTemplates(inf, func(f, v string) { check(field(ip, f), v) })
	}

	// placement.
	if pl := s.Placement; pl != nil {
		pp := field(path, "placement")
		validatePlacement(pp, pl, ps)
		switch {
		case !vc.kube && kind == KindContainer:
			// Other kinds already say that they need a cluster.
			ps.add(pp, "placement needs a Kubernetes cluster; the local runtime runs every step locally")
		case kind == KindRay && s.Ray != nil && s.Ray.Cluster != "":
			ps.add(pp, "a ray step on a shared cluster runs where that cluster is; set placement on the rayClusters entry %q instead", s.Ray.Cluster)
		case kind == KindInference:
			ps.add(pp, "an inference step's endpoint runs on inference.cluster, which outlives the run; placement does not apply to it")
		case kind == KindApproval:
			ps.add(pp, "an approval step runs no workload; placement does not apply to it")
		case kind == KindPipeline:
			ps.add(pp, "a pipeline step's child run places its own steps; placement does not apply to it")
		case kind == KindPromote:
			ps.add(pp, "a promote step runs no workload; placement does not apply to it")
		}
	}
}

func validateRunIf(path string, s *Step, ps *problems) {
	if s.RunIf == "" {
		return
	}
	rp := field(path, "runIf")
	known := false
	for _, r := range RunIfs {
		known = known || r == s.RunIf
	}
	switch {
	case !known:
		msg := fmt.Sprintf("unknown runIf %q; use one of %s", s.RunIf, joinRunIfs())
		names := make([]string, len(RunIfs))
		for i, r := range RunIfs {
			names[i] = string(r)
		}
		if sg := suggest(string(s.RunIf), names); sg != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", sg)
		}
		ps.add(rp, "%s", msg)
	case len(s.DependsOn) == 0:
		// Implicit dependencies (steps.X in templates) need X's outputs,
		// so they only make sense with allSucceeded: ask for dependsOn.
		ps.add(rp, "runIf decides from the step's dependsOn, and this step has none")
	}
}

// validateCache checks a cache block (a step's or the pipeline's).
func validateCache(path string, c *Cache, ps *problems) {
	v := c.Version
	switch {
	case len(v) > MaxCacheVersionLen:
		ps.add(field(path, "version"), "%d characters; the limit is %d", len(v), MaxCacheVersionLen)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		ps.add(field(path, "version"), "must not contain control characters")
	case strings.Contains(v, "{{"):
		ps.add(field(path, "version"), "templates are not supported in cache.version: the rendered work is already in the key")
	}
}

func joinRunIfs() string {
	s := make([]string, len(RunIfs))
	for i, r := range RunIfs {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// validateApproval checks an approval step: its block, and the step
// fields that do not apply to a wait for a person.
func validateApproval(path string, s *Step, ps *problems) {
	if s.ForEach != nil {
		ps.add(field(path, "forEach"), "an approval step is decided once; forEach does not apply")
	}
	if s.Retries != nil {
		ps.add(field(path, "retries"), "an approval step is not retried; a rejection fails it")
	}
	a := s.Approval
	if a == nil {
		return
	}
	ap := field(path, "approval")
	if a.MinRole != "" && tokens.Rank(a.MinRole) == 0 {
		ps.add(field(ap, "minRole"), "unknown role %q; use one of %s", a.MinRole, strings.Join(tokens.Roles, ", "))
	}
	if a.MinRole != "" && len(a.Approvers) > 0 {
		ps.add(field(ap, "approvers"), "set approvers or minRole, not both")
	}
	for j, r := range a.Approvers {
		if tokens.Rank(r) == 0 {
			ps.add(index(field(ap, "approvers"), j), "unknown role %q; use one of %s", r, strings.Join(tokens.Roles, ", "))
		}
	}
	switch {
	case a.OnTimeout != "" && a.OnTimeout != ApprovalApprove && a.OnTimeout != ApprovalReject:
		ps.add(field(ap, "onTimeout"), "unknown outcome %q; use %s or %s", a.OnTimeout, ApprovalApprove, ApprovalReject)
	case a.OnTimeout != "" && s.Timeout == 0:
		ps.add(field(ap, "onTimeout"), "applies when the step's timeout passes; set timeout too")
	}
}

func stepNamesSorted(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// itemsForm classifies forEach.items.
type itemsForm int

const (
	itemsInvalid itemsForm = iota
	itemsLiteral
	itemsExpr
)

// IsLiteralItems reports whether forEach items are a JSON array literal
// (not an expression).
func IsLiteralItems(raw json.RawMessage) bool {
	form, _, _, err := parseItems(raw)
	return err == nil && form == itemsLiteral
}

func parseItems(raw json.RawMessage) (itemsForm, []any, string, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return itemsInvalid, nil, "", fmt.Errorf("required: a list or an expression string")
	}
	switch t[0] {
	case '[':
		var items []any
		if err := json.Unmarshal(t, &items); err != nil {
			return itemsInvalid, nil, "", fmt.Errorf("invalid list: %v", err)
		}
		return itemsLiteral, items, "", nil
	case '"':
		var s string
		if err := json.Unmarshal(t, &s); err != nil {
			return itemsInvalid, nil, "", fmt.Errorf("invalid string: %v", err)
		}
		return itemsExpr, nil, s, nil
	}
	return itemsInvalid, nil, "", fmt.Errorf("must be a list or an expression string")
}

func validateItems(raw json.RawMessage, path string, sc *refScope, ps *problems) {
	form, items, src, err := parseItems(raw)
	if err != nil {
		ps.add(path, "%s", err.Error())
		return
	}
	switch form {
	case itemsLiteral:
		if len(items) > MaxForEachItems {
			ps.add(path, "%d items; the limit is %d", len(items), MaxForEachItems)
		}
	case itemsExpr:
		switch {
		case strings.TrimSpace(src) == "":
			ps.add(path, "expression must not be empty")
		case strings.Contains(src, "{{"):
			ps.add(path, "write items as a plain expression, without {{ }}")
		default:
			_, msgs := checkExpr(src, modeValue, sc)
			for _, m := range msgs {
				ps.add(path, "%s", m)
			}
		}
	}
}

// Dependencies returns, for each step, the sorted indexes of the steps it
// waits for: its dependsOn plus every step whose outputs it references in
// when, forEach.items or templates (container, ray, spark, inference). The workflow schedules from
// this, so implicit references can never race their producers. Call it only
// on a pipeline that passed Validate; unknown names are ignored.
func Dependencies(p *Spec) [][]int {
	return stepRefs(p, nil, RefDependsOn|RefWhen|RefItems|RefTemplates)
}

// RefPart is a part of a step whose references ReferencesWithin
// collects: its dependsOn, when, forEach.items expression, and templates
// (the work it runs, rendered per item in a forEach, and forEach.when,
// evaluated per item with them). The workflow renders
// each part where the outputs it reads are: those of a wide forEach stay
// out of its history.
type RefPart int

const (
	RefDependsOn RefPart = 1 << iota
	RefWhen
	RefItems
	RefTemplates
)

// ReferencesWithin returns, for each step of p, the sorted indexes of the
// steps whose outputs it reads in parts (Dependencies is every part). The
// steps may also read outer steps (exit handlers: p is
// Pipeline.ExitPipeline(), outer the pipeline's step names; nil for a
// pipeline): outer[k] is index len(p.Steps)+k. Outer steps have ended
// before any of p's start, so Dependencies never holds them; the workflow
// needs them to know where an exit handler reads a wide step's outputs.
func ReferencesWithin(p *Spec, outer []string, parts RefPart) [][]int {
	return stepRefs(p, outer, parts)
}

// OutputsReferences returns the sorted indexes of the steps the
// pipeline's outputs read.
func OutputsReferences(p *Spec) []int {
	byName := stepIndexes(p, nil)
	sc := &refScope{steps: byName, params: map[string]bool{}, itemOK: true}
	set := map[int]bool{}
	for _, k := range sortedStringKeys(p.Outputs) {
		segs, err := splitTemplate(p.Outputs[k])
		if err != nil {
			continue
		}
		for _, sg := range segs {
			if sg.isExpr {
				for _, n := range analyzeExpr(sg.text, sc).steps {
					set[byName[n]] = true
				}
			}
		}
	}
	return sortedSet(set)
}

// stepIndexes maps the step names of p, then outer (see ReferencesWithin),
// to their indexes; the first of duplicates wins.
func stepIndexes(p *Spec, outer []string) map[string]int {
	byName := map[string]int{}
	for i, s := range p.Steps {
		if _, dup := byName[s.Name]; !dup && s.Name != "" {
			byName[s.Name] = i
		}
	}
	for k, n := range outer {
		if _, dup := byName[n]; !dup && n != "" {
			byName[n] = len(p.Steps) + k
		}
	}
	return byName
}

func sortedSet(set map[int]bool) []int {
	out := make([]int, 0, len(set))
	for j := range set {
		out = append(out, j)
	}
	sort.Ints(out)
	return out
}

func stepRefs(p *Spec, outer []string, parts RefPart) [][]int {
	byName := stepIndexes(p, outer)
	sc := &refScope{steps: byName, params: map[string]bool{}, itemOK: true}
	out := make([][]int, len(p.Steps))
	for i := range p.Steps {
		s := &p.Steps[i]
		set := map[int]bool{}
		addName := func(n string) {
			if j, ok := byName[n]; ok && j != i {
				set[j] = true
			}
		}
		if parts&RefDependsOn != 0 {
			for _, d := range s.DependsOn {
				addName(d)
			}
			// An input artifact is read from its producer: an order too.
			if a := s.DeclaredArtifacts(); a != nil {
				for _, in := range a.Inputs {
					if n, _, ok := SplitArtifactRef(in.From); ok && !in.IsRef() {
						addName(n)
					}
				}
			}
			// So is the artifact a promote step registers.
			// (of a forEach's item too, its index perhaps a template).
			if s.Promote != nil {
				if n, ok := promoteFromStep(s.Promote.From); ok {
					addName(n)
				}
			}
		}
		refs := func(src string) {
			for _, n := range analyzeExpr(src, sc).steps {
				addName(n)
			}
		}
		if strings.TrimSpace(s.When) != "" && parts&RefWhen != 0 {
			refs(s.When)
		}
		if s.ForEach != nil && parts&RefItems != 0 {
			if form, _, src, err := parseItems(s.ForEach.Items); err == nil && form == itemsExpr {
				refs(src)
			}
		}
		if s.ForEach != nil && strings.TrimSpace(s.ForEach.When) != "" && parts&RefTemplates != 0 {
			// Evaluated per item with its templates, where they are.
			refs(s.ForEach.When)
		}
		tmpl := func(v string) {
			if parts&RefTemplates == 0 {
				return
			}
			segs, err := splitTemplate(v)
			if err != nil {
				return
			}
			for _, sg := range segs {
				if sg.isExpr {
					refs(sg.text)
				}
			}
		}
		if c := s.Container; c != nil {
			for _, v := range c.Command {
				tmpl(v)
			}
			for _, v := range c.Args {
				tmpl(v)
			}
			for _, v := range c.Env {
				tmpl(v) // order irrelevant: results go into a set
			}
			tmpl(c.WorkingDir)
		}
		if a := s.DeclaredArtifacts(); a != nil {
			for _, in := range a.Inputs {
				tmpl(in.Artifact)
				tmpl(in.Model)
				tmpl(in.URI)
			}
		}
		if s.Ray != nil {
			rayTemplates(s.Ray, func(_, v string) { tmpl(v) })
		}
		if s.Spark != nil {
			sparkTemplates(s.Spark, func(_, v string) { tmpl(v) })
		}
		if s.Inference != nil {
			inferenceTemplates(s.Inference, func(_, v string) { tmpl(v) })
		}
		if s.Approval != nil {
			tmpl(s.Approval.Message)
		}
		if s.Pipeline != nil {
			pipelineTemplates(s.Pipeline, func(_, v string) { tmpl(v) })
		}
		if s.Promote != nil {
			promoteTemplates(s.Promote, func(_, v string) { tmpl(v) })
		}
		out[i] = sortedSet(set)
	}
	return out
}

// reportCycles adds one problem per strongly connected component of the
// dependency graph, showing one cycle through its first step, since every
// step in a component waits on every other and none could ever start.
func reportCycles(p *Spec, section string, ps *problems) {
	deps := Dependencies(p)
	n := len(deps)
	idx := make([]int, n)
	low := make([]int, n)
	on := make([]bool, n)
	for i := range idx {
		idx[i] = -1
	}
	var stack []int
	counter := 0
	var comps [][]int
	var strong func(v int)
	strong = func(v int) {
		idx[v], low[v] = counter, counter
		counter++
		stack = append(stack, v)
		on[v] = true
		for _, w := range deps[v] {
			if idx[w] < 0 {
				strong(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], idx[w])
			}
		}
		if low[v] == idx[v] {
			var comp []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				comp = append(comp, w)
				if w == v {
					break
				}
			}
			if len(comp) > 1 {
				sort.Ints(comp)
				comps = append(comps, comp)
			}
		}
	}
	for v := 0; v < n; v++ {
		if idx[v] < 0 {
			strong(v)
		}
	}
	sort.Slice(comps, func(i, j int) bool { return comps[i][0] < comps[j][0] })
	for _, comp := range comps {
		in := map[int]bool{}
		for _, v := range comp {
			in[v] = true
		}
		// Shortest cycle through the component's first step (BFS over
		// sorted edges, so the choice is deterministic).
		start := comp[0]
		prev := map[int]int{}
		queue := []int{start}
		end := -1
	bfs:
		for len(queue) > 0 {
			v := queue[0]
			queue = queue[1:]
			for _, w := range deps[v] {
				if !in[w] {
					continue
				}
				if w == start {
					end = v
					break bfs
				}
				if _, seen := prev[w]; !seen {
					prev[w] = v
					queue = append(queue, w)
				}
			}
		}
		if end < 0 {
			continue // unreachable: a component of two or more has a cycle through start
		}
		var cyc []int
		for v := end; v != start; v = prev[v] {
			cyc = append(cyc, v)
		}
		cyc = append(cyc, start)
		names := []string{}
		for k := len(cyc) - 1; k >= 0; k-- {
			names = append(names, p.Steps[cyc[k]].Name)
		}
		names = append(names, p.Steps[start].Name)
		ps.add(index(section, start), "dependency cycle: %s", strings.Join(names, " -> "))
	}
}

// MaxEstimatedHistoryEvents is what a run may plan to use of Temporal's
// 51,200 history events when every step succeeds at once; the rest is for
// retries, bookkeeping and cleanup (run-time guards in workflows/historylimits.go
// stop a run that would go past the hard limit).
const MaxEstimatedHistoryEvents = 40_000

// eventsPerAttempt is the history cost of one step attempt: activity
// scheduled, started, completed, and the workflow task (scheduled,
// started, completed) that handles it; Kubernetes steps add a cluster
// selection activity.
const eventsPerAttempt = 6

// The run-history cost of a wide forEach (workflows/wide.go): a few
// events for the step itself, and per batch a child workflow started and
// completed with the workflow task that handles it. WideBatchMax is the
// most items one batch workflow owns.
const (
	eventsPerWideStep  = 10
	eventsPerWideBatch = 8
	WideBatchMax       = 1000
)

// EstimateHistoryEvents estimates the history events of a run in which
// every step succeeds at its first attempt. A forEach over a literal list
// counts its items; one over an expression counts as one item, since its
// length is known only at run time (the run-time guard covers it).
func EstimateHistoryEvents(p *Spec) int {
	n := 20 // start, bookkeeping, mirror, end
	if len(p.OnExit) > 0 {
		n += 6 // the exit handlers' timer and a mirror write
	}
	return n + stepsHistoryEvents(p, p.Steps) + stepsHistoryEvents(p, p.OnExit)
}

func stepsHistoryEvents(p *Spec, steps []Step) int {
	n := 0
	for i := range steps {
		s := &steps[i]
		per := eventsPerAttempt
		switch {
		case s.Kind == KindInference:
			// No cluster selection, but the rollout's stages reach the
			// run as progress signals (a few events each).
			per += eventsPerAttempt
		case s.Kind == KindPipeline:
			// Resolving the child's version, then starting the child run
			// and its completion.
			per += eventsPerAttempt
		case s.Kind == KindRay || s.Kind == KindSpark || s.EffectivePlacement(p) != nil:
			per += eventsPerAttempt
		}
		if s.EffectiveCache(p) != nil {
			// The cache lookup and store are local activities: a marker
			// event each.
			per += 2
		}
		items := 1
		if s.ForEach != nil {
			if form, list, _, err := parseItems(s.ForEach.Items); err == nil && form == itemsLiteral {
				items = max(len(list), 1)
			}
		}
		if items > WideThreshold {
			// A wide step's items run in batch child workflows, each
			// with its own history: the run pays per batch.
			n += eventsPerWideStep + (items+WideBatchMax-1)/WideBatchMax*eventsPerWideBatch
			continue
		}
		n += items * per
	}
	return n
}

// validateSecrets checks a container's secret references: valid and unique
// names and variables, no variable also in env or reserved by Atelier, no
// templates (a reference is literal so that it can be checked here).
func validateSecrets(path string, c *Container, ps *problems) {
	checkSecretRefs(path, c.Secrets, func(env string) string {
		if _, clash := c.Env[env]; clash {
			return fmt.Sprintf("%s is also set in env: one value per variable", env)
		}
		return ""
	}, ps)
}

// checkSecretRefs checks a step's secret references (container, ray or
// spark secrets) at path: a secret name each, given as exactly one of a
// variable or a file, no variable or file twice, no ATELIER_ variable.
// clash says why a variable is already set by the step's own settings
// ("" when it is not).
func checkSecretRefs(path string, refs []SecretEnv, clash func(env string) string, ps *problems) {
	seen, files := map[string]bool{}, map[string]bool{}
	for j, r := range refs {
		sp := index(path, j)
		if !schema.ValidSecretName(r.Name) {
			ps.add(field(sp, "name"), "%q is not a secret name (lowercase letters, digits, '.', '_', '-'; at most 63)", r.Name)
		}
		if (r.Env == "") == (r.File == "") {
			ps.add(sp, "give the secret to the step as exactly one of env (a variable) or file (a file name under $ATELIER_SECRETS)")
			continue
		}
		if r.File != "" {
			switch {
			case !secretFileRE.MatchString(r.File):
				ps.add(field(sp, "file"), "%q is not a file name (letters, digits, '.', '_', '-'; no '/'; at most 128)", r.File)
			case files[r.File]:
				ps.add(field(sp, "file"), "%s is given twice", r.File)
			}
			files[r.File] = true
			continue
		}
		switch {
		case r.Env == "" || strings.ContainsAny(r.Env, "=\x00") || strings.Contains(r.Env, "{{"):
			ps.add(field(sp, "env"), "invalid environment variable name %q", r.Env)
		case strings.HasPrefix(r.Env, "ATELIER_"):
			ps.add(field(sp, "env"), "%s: ATELIER_ variables are set by Atelier", r.Env)
		case seen[r.Env]:
			ps.add(field(sp, "env"), "%s is given twice", r.Env)
		default:
			if why := clash(r.Env); why != "" {
				ps.add(field(sp, "env"), "%s", why)
			}
		}
		seen[r.Env] = true
	}
}

func sortedKeysOfGoals(m map[string]MetricGoal) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
