// Package gopipeline is the example native Go pipeline registered on every
// worker as "example.TrainEvaluate": prepare a dataset, train one model per
// learning rate in parallel, evaluate the best, and deploy it only if it
// beats a threshold. Its steps are POSIX shell commands so it runs on the
// local runtime of any machine.
//
// Start it through REST:
//
//	curl -H "Authorization: Bearer $TOKEN" -X POST $URL/v1/projects/default/runs \
//	  -d '{"workflow":"example.TrainEvaluate","input":{"dataset":"iris","learningRates":[0.01,0.1],"threshold":0.85}}'
//
// or with the Temporal Go SDK (see examples/sdkstart).
//
// example.FanOut (fanout.go) squares 0..items-1 in one step per item with
// Run.ForEach, wide past 1,000 items, and sums them with Run.Reduce; it is
// registered with the examples too:
//
//	curl … -d '{"workflow":"example.FanOut","input":{"items":5000,"parallelism":100}}'
//
// Two more examples are not registered by default: example.TrainWithCleanup
// (cleanup.go, an exit handler with Run.OnExit) and example.Chain
// (chain.go, five steps whose third fails until a marker file exists,
// to show retry from failure of a Go pipeline run).
package gopipeline
