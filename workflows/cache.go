package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Step caching across runs. A step (or forEach item) with caching on is
// keyed on its rendered work (cacheKey); one local activity looks the key
// up in the project's entries before anything runs, and one stores the
// outputs after the step succeeded. A hit ends the step CACHED with the
// source run, step and attempt, the same state a retry's reuse gives
// (CachedFrom says where either came from). Steps without caching never
// reach this file.

// versionStepCache guards step caching (workflow.GetVersion change ID;
// never reuse it). It is asked only when a cached step is about to run,
// so runs without caching carry no marker.
const versionStepCache = "atelier.step-cache"

// cacheKeyVersion is hashed into every key: bump it when what the key
// covers changes, so old entries stop matching rather than match wrongly.
const cacheKeyVersion = 1

// WithCache caches the step across runs (see pipeline.Cache): a successful
// execution of the same rendered work in the same project, within c.TTL,
// is reused instead of running. Container, ray and spark steps; ignored
// for inference steps and when c is nil or disabled.
func WithCache(c *pipeline.Cache) StepOption {
	return func(cfg *stepConfig) {
		if c != nil && (c.Enabled == nil || *c.Enabled) {
			cfg.cache = c
		}
	}
}

// cacheable reports whether work of this kind may be cached.
func cacheable(k pipeline.StepKind) bool {
	return k == pipeline.KindContainer || k == pipeline.KindRay || k == pipeline.KindSpark
}

// stepCacheOn reports whether this run caches steps: false for runs
// recorded before caching existed (they never asked).
func (r *Run) stepCacheOn() bool {
	if r.cacheGuard == 0 {
		r.cacheGuard = 1
		if workflow.GetVersion(r.root, versionStepCache, workflow.DefaultVersion, 1) >= 1 {
			r.cacheGuard = 2
		}
	}
	return r.cacheGuard == 2
}

// runCached runs work whose step has caching on: a hit ends the step
// CACHED with the stored outputs; a miss runs it (runUncached) and stores the
// outputs once it succeeded. A lookup or store that fails never fails the
// step: the step runs (or keeps its result) and the run gets a warning.
func (r *Run) runCached(ctx workflow.Context, st *runstate.StepStatus, stepName string, item *int, w stepWork, cfg stepConfig, opts []StepOption) (Outputs, error) {
	// Unresolvable inputs: the step fails when it runs.
	inputs, _ := r.artifactInputs(stepName, item, w.artifacts())
	key, warning := cacheKey(stepName, w, cfg, r.sharedRayTemplate(w), inputs)
	st.CacheKey = key
	if warning != "" {
		r.warnOnce(warning)
	}
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		ScheduleToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 200 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 5 * time.Second, MaximumAttempts: 5,
		},
	})
	if !r.status.CacheBypass {
		var res activities.CacheLookupResult
		err := workflow.ExecuteLocalActivity(lctx, activities.CacheLookupName, activities.CacheLookupRequest{
			Project: r.status.Project, Key: key, TTL: cfg.cache.TTL.D(),
		}).Get(lctx, &res)
		switch {
		case ctx.Err() != nil:
			r.endStep(st, runstate.StepCancelled, "", "run cancelled")
			return nil, errCancelled
		case err != nil:
			r.warnOnce(fmt.Sprintf("step cache lookup failed (%s); steps ran instead", stepErrMessage(err)))
		case res.Hit:
			now := workflow.Now(ctx)
			st.StartedAt = &now
			// Entries stored before metrics were cached carry none.
			st.Outputs, st.Artifacts, st.Inputs, st.Metrics = res.Outputs, res.Artifacts, inputs, res.Metrics
			src := res.Source
			st.CachedFrom = &src
			r.endStep(st, runstate.StepCached, "", reusedMessage(&src))
			return res.Outputs, nil
		}
	}
	out, err := r.runUncached(ctx, st, stepName, item, w, cfg, opts)
	if err != nil || len(st.Attempts) == 0 {
		return out, err
	}
	pipeline := r.status.Pipeline
	if pipeline == "" {
		pipeline = r.status.Workflow
	}
	req := activities.CacheStoreRequest{
		Project: r.status.Project, Key: key, Pipeline: pipeline,
		Source:  runstate.CacheSource{Run: r.status.RunID, Step: stepName, Item: item, Attempt: st.Attempts[len(st.Attempts)-1].Number},
		Outputs: out, Artifacts: st.Artifacts, Metrics: st.Metrics, TTL: cfg.cache.TTL.D(),
	}
	// Stored beside what follows, not before it: the step's successors
	// start at once, and the run waits for its stores before it ends
	// (finish). Disconnected: a result that succeeded stays worth
	// storing when the run is cancelled right after.
	sctx, _ := workflow.NewDisconnectedContext(lctx)
	r.cacheStores++
	workflow.Go(sctx, func(gctx workflow.Context) {
		defer func() { r.cacheStores-- }()
		if err := workflow.ExecuteLocalActivity(gctx, activities.CacheStoreName, req).Get(gctx, nil); err != nil {
			r.warnOnce(fmt.Sprintf("storing a step's result in the cache failed (%s); later runs will run it again", stepErrMessage(err)))
		}
	})
	return out, nil
}

// awaitCacheStores waits (bounded) for the step cache stores still in
// flight, so that a finished run's results are in the cache. Runs
// without caching have none and never wait.
func (r *Run) awaitCacheStores(ctx workflow.Context) {
	if r.cacheStores > 0 {
		_, _ = workflow.AwaitWithTimeout(ctx, time.Minute, func() bool { return r.cacheStores == 0 })
	}
}

// reusedMessage is the message of a CACHED step: where its outputs come
// from. A retry's reuse and a cache hit read alike.
func reusedMessage(src *runstate.CacheSource) string {
	msg := "reused from run " + src.Run
	if src.Step == "" {
		return msg
	}
	msg += " (step " + src.Step
	if src.Item != nil {
		msg += "[" + strconv.Itoa(*src.Item) + "]"
	}
	if src.Attempt > 0 {
		msg += ", attempt " + strconv.Itoa(src.Attempt)
	}
	return msg + ")"
}

// warnOnce adds a run warning unless the run already has it.
func (r *Run) warnOnce(msg string) {
	if slices.Contains(r.status.Warnings, msg) {
		return
	}
	r.status.Warnings = append(r.status.Warnings, msg)
	r.touch()
}

// sharedRayTemplate is the shared RayCluster a ray step runs on, or nil.
func (r *Run) sharedRayTemplate(w stepWork) *pipeline.RayClusterTemplate {
	if w.ray == nil || w.ray.Cluster == "" {
		return nil
	}
	for i := range r.rayTemplates {
		if r.rayTemplates[i].Name == w.ray.Cluster {
			return &r.rayTemplates[i].RayClusterTemplate
		}
	}
	return nil
}

// cacheKeyDoc is what a cache key hashes: everything about a step's
// rendered work that decides its result, and nothing that only decides
// where, when or how often it runs. docs/api.md ("Step caching") lists it;
// cache_internal_test.go fails when a spec field is added to the work
// without being classified here.
type cacheKeyDoc struct {
	KeyVersion int `json:"keyVersion"`
	// Step is the step's name: two steps of a pipeline never share an
	// entry, whatever their work (one may read files the other's
	// dependencies wrote); a step of the same name and work in another
	// pipeline of the project does (a shared "prepare").
	Step string            `json:"step"`
	Kind pipeline.StepKind `json:"kind"`
	// Runtime is "local" or "kubernetes": the local runtime runs the
	// command on the worker's host and ignores the image, so the two may
	// compute different results from the same spec.
	Runtime   string          `json:"runtime"`
	Version   string          `json:"version,omitempty"`
	Container *keyedContainer `json:"container,omitempty"`
	Ray       *keyedRay       `json:"ray,omitempty"`
	Spark     *keyedSpark     `json:"spark,omitempty"`
}

type keyedContainer struct {
	Image      string            `json:"image,omitempty"`
	Command    []string          `json:"command"`
	Args       []string          `json:"args,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	GPU        keyedGPU          `json:"gpu"`
	// Secrets by name and variable, never by value: a changed value is not
	// a miss (bump cache.version to run again).
	Secrets []pipeline.SecretEnv `json:"secrets,omitempty"`
	// Inputs are the input artifacts by content (a changed dataset is a
	// miss, the same bytes from another run a hit); Outputs what it
	// stores, as declared.
	Inputs  []keyedInput              `json:"inputs,omitempty"`
	Outputs []pipeline.ArtifactOutput `json:"outputs,omitempty"`
}

// keyedInput is an input artifact in a key: its name and digest.
type keyedInput struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// keyedGPU: the GPU count and model change numerics; CPU and memory
// requests only decide where, and whether, the work fits.
type keyedGPU struct {
	Count int    `json:"count,omitempty"`
	Type  string `json:"type,omitempty"`
}

type keyedRay struct {
	Entrypoint string         `json:"entrypoint"`
	RuntimeEnv map[string]any `json:"runtimeEnv,omitempty"`
	// Secrets by name and variable or file, never by value (as a
	// container's).
	Secrets []pipeline.SecretEnv `json:"secrets,omitempty"`
	// Cluster is the template of the RayCluster the job runs on: its own,
	// or the run's shared one it names (by content, not by name).
	Cluster keyedRayCluster `json:"cluster"`
	// Inputs and Outputs: as a container's (absent without artifacts, so
	// the keys of earlier ray steps stay).
	Inputs  []keyedInput              `json:"inputs,omitempty"`
	Outputs []pipeline.ArtifactOutput `json:"outputs,omitempty"`
}

type keyedRayCluster struct {
	Image      string             `json:"image,omitempty"`
	RayVersion string             `json:"rayVersion,omitempty"`
	Head       keyedGPU           `json:"head"`
	Workers    []keyedWorkerGroup `json:"workers,omitempty"`
}

type keyedWorkerGroup struct {
	Name        string   `json:"name"`
	Replicas    int32    `json:"replicas"`
	MinReplicas int32    `json:"minReplicas,omitempty"`
	MaxReplicas int32    `json:"maxReplicas,omitempty"`
	GPU         keyedGPU `json:"gpu"`
}

type keyedSpark struct {
	Type                string            `json:"type"`
	Image               string            `json:"image"`
	SparkVersion        string            `json:"sparkVersion,omitempty"`
	MainClass           string            `json:"mainClass,omitempty"`
	MainApplicationFile string            `json:"mainApplicationFile"`
	Arguments           []string          `json:"arguments,omitempty"`
	SparkConf           map[string]string `json:"sparkConf,omitempty"`
	Driver              keyedSparkRole    `json:"driver"`
	Executor            keyedSparkRole    `json:"executor"`
	// Secrets by name and variable or file, never by value (as a
	// container's).
	Secrets []pipeline.SecretEnv `json:"secrets,omitempty"`
	// Inputs and Outputs: as a ray job's.
	Inputs  []keyedInput              `json:"inputs,omitempty"`
	Outputs []pipeline.ArtifactOutput `json:"outputs,omitempty"`
}

// keyedSparkRole: cores and instances set Spark's parallelism (and so
// partitioning); memory only whether it fits.
type keyedSparkRole struct {
	Cores     int32    `json:"cores,omitempty"`
	Instances int32    `json:"instances,omitempty"`
	GPU       keyedGPU `json:"gpu"`
}

// cacheKey is the hex SHA-256 of step's cacheKeyDoc, and a warning
// when the work runs on Kubernetes from an image named by a tag (a tag
// can move to another image without the key changing). The project is
// not hashed: entries are stored per project, so it scopes every lookup.
// keyedInputs are input artifacts by name and content.
func keyedInputs(inputs []runstate.Artifact) []keyedInput {
	var out []keyedInput
	for _, in := range inputs {
		out = append(out, keyedInput{Name: in.Name, Digest: in.Digest})
	}
	return out
}

func cacheKey(step string, w stepWork, cfg stepConfig, shared *pipeline.RayClusterTemplate, inputs []runstate.Artifact) (string, string) {
	doc := cacheKeyDoc{KeyVersion: cacheKeyVersion, Step: step, Kind: w.kind, Runtime: "kubernetes", Version: cfg.cache.Version}
	var images []string
	switch w.kind {
	case pipeline.KindRay:
		r := w.ray
		tmpl := r.RayClusterTemplate
		if shared != nil {
			tmpl = *shared
		}
		doc.Ray = &keyedRay{Entrypoint: r.Entrypoint, RuntimeEnv: r.RuntimeEnv, Secrets: r.Secrets, Cluster: keyedRayTemplate(tmpl),
			Inputs: keyedInputs(inputs)}
		if r.Artifacts != nil {
			doc.Ray.Outputs = r.Artifacts.Outputs
		}
		images = append(images, tmpl.Image)
	case pipeline.KindSpark:
		s := w.spark
		doc.Spark = &keyedSpark{
			Type: s.Type, Image: imageKey(s.Image), SparkVersion: s.SparkVersion, MainClass: s.MainClass,
			MainApplicationFile: s.MainApplicationFile, Arguments: s.Arguments, SparkConf: s.SparkConf,
			Driver:   keyedSparkRole{Cores: s.Driver.Cores, GPU: keyedGPU{s.Driver.GPU, s.Driver.GPUType}},
			Executor: keyedSparkRole{Cores: s.Executor.Cores, Instances: s.Executor.Instances, GPU: keyedGPU{s.Executor.GPU, s.Executor.GPUType}},
			Secrets:  s.Secrets,
			Inputs:   keyedInputs(inputs),
		}
		if s.Artifacts != nil {
			doc.Spark.Outputs = s.Artifacts.Outputs
		}
		images = append(images, s.Image)
	default:
		c := w.container
		if cfg.placement == nil {
			doc.Runtime = "local"
		}
		kc := &keyedContainer{Image: imageKey(c.Image), Command: c.Command, Args: c.Args, Env: c.Env, WorkingDir: c.WorkingDir, Secrets: c.Secrets}
		if c.Resources != nil {
			kc.GPU = keyedGPU{c.Resources.GPU, c.Resources.GPUType}
		}
		if c.Artifacts != nil {
			kc.Outputs = c.Artifacts.Outputs
		}
		kc.Inputs = keyedInputs(inputs)
		doc.Container = kc
		if doc.Runtime == "kubernetes" {
			images = append(images, c.Image)
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		// Unreachable for these types (runtimeEnv values came from JSON);
		// a key nobody else can produce makes the step run, uncached.
		b = []byte(fmt.Sprintf("unkeyable: %v", err))
	}
	sum := sha256.Sum256(b)
	warning := ""
	for _, img := range images {
		if img != "" && !strings.Contains(img, "@") {
			warning = fmt.Sprintf("image %q is named by a tag: cached results are keyed on the tag as written, and a tag can move to another image; pin a digest (image@sha256:…) or bump cache.version when it moves", img)
			break
		}
	}
	return hex.EncodeToString(sum[:]), warning
}

func keyedRayTemplate(t pipeline.RayClusterTemplate) keyedRayCluster {
	k := keyedRayCluster{Image: imageKey(t.Image), RayVersion: t.RayVersion, Head: keyedGPU{t.Head.GPU, t.Head.GPUType}}
	for _, g := range t.Workers {
		k.Workers = append(k.Workers, keyedWorkerGroup{Name: g.Name, Replicas: g.Replicas, MinReplicas: g.MinReplicas, MaxReplicas: g.MaxReplicas, GPU: keyedGPU{g.GPU, g.GPUType}})
	}
	return k
}

// imageKey is how an image enters the key: by digest when the reference
// has one (repository@sha256:…, any tag dropped, since the digest decides),
// else as written.
func imageKey(image string) string {
	name, digest, ok := strings.Cut(image, "@")
	if !ok {
		return image
	}
	// Drop a tag: the last ':' after the last '/' (a registry port has a
	// '/' after it).
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	return name + "@" + digest
}
