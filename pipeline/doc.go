// Package pipeline is the pipeline language: the declarative pipeline format
// (a JSON/YAML DAG), its strict parser, its validator (which reports every
// problem with its path) and the template/condition evaluation the generic
// pipeline workflow relies on.
//
// Everything here is pure and deterministic so it can run inside workflow code.
//
// # Expressions
//
// when, forEach.items (as a string) and the "{{ … }}" templates are expr-lang
// expressions (https://expr-lang.org). Templates may appear in container
// command, args, env values and workingDir; ray entrypoint and the string
// values inside ray runtimeEnv; spark mainApplicationFile, arguments and
// sparkConf values; inference endpoint and every string of the endpoint
// spec (model, image, args, env values, ...; its durations are parsed with
// the spec, so they hold none); approval message; pipeline params; the
// pipeline's outputs. Expressions see four names:
//
//	params.<name>              resolved run parameters
//	steps.<step>.outputs…      outputs of a finished step; a list with one
//	                           entry per item for a forEach step
//	item                       the current forEach element (templates
//	                           of forEach steps only)
//	run.id, run.project, run.pipeline
//	run.state, run.failedSteps, run.error   (exit handlers only)
//
// Step names must be written literally (steps.train, or steps["eval-1"] for
// a name with '-', not steps[x]) because a reference is also a dependency,
// computed before the run starts.
//
// Builtins that would make a replay diverge are removed: now() (wall clock),
// date() and timezone() (host time zone data). keys(), values() and toPairs()
// return entries sorted by key instead of in Go's random map order.
//
// # Missing keys
//
// Reading a key that does not exist under params, steps, item or run is an
// error naming the path (steps.a.outputs has no key "acc"), not expr's
// default nil: a typo then fails the step with a clear message instead of
// rendering "" or comparing nil. Optional reads opt out: steps.a.outputs?.acc,
// steps.a.outputs.acc ?? 0.5, "acc" in steps.a.outputs.
//
// # Rendering
//
// RenderContainer, RenderRay, RenderSpark and RenderInference render a
// step's templates. A
// template's value is written as: strings as is, numbers as encoding/json
// prints them (0.01, 3, 1e+21), booleans as true/false, null as "", objects
// and lists as compact JSON with sorted keys. A "}}" outside a template is
// literal text (JSON in shell arguments often ends that way); a literal "{{"
// is written {{ "{{" }}.
//
// # Trigger rules
//
// A step's runIf (RunIf) decides from the final states of its direct
// dependencies (dependsOn and steps referenced by its expressions) whether
// it runs: allSucceeded (the default: a dependency skipped by its when
// skips the step too), noneFailed (SKIPPED dependencies are fine),
// allDone (any final state) and anyFailed (at least one FAILED). CACHED
// counts as SUCCEEDED; CANCELLED is neither a success nor a failure. A
// step whose rule is not met is SKIPPED with the rule and the dependency
// in its message. Once a step of the run has failed, only allDone and
// anyFailed steps still start (the run fails fast) and the run ends
// FAILED whatever they do. Nothing new starts after a cancel or the
// pipeline deadline.
//
// # Exit handlers
//
// Pipeline.OnExit lists steps that run once every step has ended,
// whatever the outcome (onexit.go): they may depend on each other, not on
// Steps; their templates may read the outputs of Steps that succeeded and
// run.state, run.failedSteps and run.error, which exist only there.
//
// # Approval steps
//
// A step of kind approval (ApprovalStep) waits for a token whose role the
// step allows (minRole, default editor, or approvers) to approve or
// reject it, with a comment when commentRequired; the step's timeout, if
// set, decides onTimeout (reject by default). Its message may hold
// templates, rendered when it starts. It takes no forEach,
// retries or placement, and no runtime: every runtime accepts it.
//
// # Step caching
//
// A cache block (Cache: enabled, version, ttl) on a container, ray or
// spark step, or on the pipeline as a default (Step.EffectiveCache merges
// them), makes the workflow reuse the outputs of an earlier successful
// execution of the same rendered work in the same project. The key is
// computed by the workflow from the rendered step (workflows/cache.go;
// what it covers is listed in docs/api.md, "Step caching"); version is
// part of it and holds no templates. Approval and inference steps refuse
// a cache block; a pipeline default skips them.
//
// # Pipeline steps and outputs
//
// A step of kind pipeline (PipelineStep) runs another stored pipeline of
// the run's project as a child run; its outputs are the child pipeline's
// Outputs. A pipeline's outputs and a pipeline step's params are rendered
// typed (RenderPipelineStep, EvalOutputs): a string that is exactly one
// "{{ expr }}" becomes the expression's value as JSON data, any other is
// rendered as RenderString does. Validate checks the block, names and
// templates; what needs the catalogue (the pipeline and version exist,
// params against the child's declared ones) is CheckPipelineStep, which
// the gateway runs with the stored child, and again the workflow, with
// ResolveParams, once the step has resolved the version it runs. Child
// runs nest at most MaxPipelineDepth levels.
//
// # Inference steps
//
// An inference step's spec is an inference.EndpointSpec, parsed as
// strictly as the rest (its durations included) and validated by
// inference.Validate when the pipeline is: its problems come back under
// steps[i].inference.spec with the endpoint package's paths. A value that
// holds a template is checked when the rendered step runs instead.
package pipeline
