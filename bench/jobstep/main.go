// Command jobstep measures what a one-step pipeline costs end to end where
// its step runs: the same pipeline (one step running `echo`) started
// through the REST gateway and polled until SUCCEEDED, placed
//
//   - on the local runtime (the baseline: the worker runs a process);
//   - on a Kubernetes cluster, its Job's pod on a kwok fake node, which
//     exits at once (what Atelier and the control plane cost a Job step);
//   - on the same cluster, its Job's pod on the real node (kubelet,
//     containerd, runc: what a real container adds).
//
// One stack (Temporal, Postgres, gateway, local worker, a cluster worker,
// the control plane and the real node), the three placements interleaved,
// -r measured runs each after a warm-up: median, spread and the ratio of
// medians to the local runtime's.
//
//	go run ./bench/jobstep [-r 10] [-quick]
//
// It needs root and the node's binaries (make ensure-node; elsewhere it
// says what is missing and exits 0) and takes the machine's real-node
// lock. The report (markdown) goes to stdout, progress to stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
	"github.com/atelier-ml/atelier/wire"
)

const (
	project = "bench"
	cluster = "bench"
)

func main() {
	r := flag.Int("r", 10, "measured runs per placement, interleaved, after one warm-up each")
	quick := flag.Bool("quick", false, "smoke run: -r 2 unless given")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["r"] {
			*r = 2
		}
	}
	if err := kubetest.RealNodeAvailable(); err != nil {
		fmt.Fprintln(os.Stderr, "jobstep: skipped:", err)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, max(*r, 1)); err != nil {
		fmt.Fprintln(os.Stderr, "jobstep:", err)
		os.Exit(1)
	}
}

// placements are the three pipelines: name → the step's placement and pod.
var placements = []struct{ name, yaml string }{
	{"local", `
steps:
  - name: echo
    container: {command: ["echo", "hello"]}
`},
	{"kwok", fmt.Sprintf(`
steps:
  - name: echo
    placement: {cluster: %s}
    container:
      image: %s
      command: ["echo", "hello"]
      pod: {nodeSelector: {type: kwok}}
`, cluster, kubetest.StepImage)},
	{"real node", fmt.Sprintf(`
steps:
  - name: echo
    placement: {cluster: %s}
    container:
      image: %s
      command: ["echo", "hello"]
      pod:
        nodeSelector: {%[3]s: "true"}
        tolerations: [{key: %[3]s, operator: Exists, effect: NoSchedule}]
`, cluster, kubetest.StepImage, kubetest.RealNodeLabel)},
}

func run(ctx context.Context, reps int) error {
	c, err := kubetest.StartControlPlaneCluster(benchstack.Logf)
	if err != nil {
		return err
	}
	defer func() { _ = c.Stop() }()
	if err := kubetest.CreateNodes(ctx, c.Clientset(), []*corev1.Node{kubetest.MakeNode("kwok-1").Label("type", "kwok").Ready(true).Obj()}); err != nil {
		return err
	}
	wl, err := kubetest.NewWorkloads(c.RESTConfig())
	if err != nil {
		return err
	}
	// kwok's pods exit at once, as the real node's `echo` does.
	wl.Script = func(kubetest.PodRef) kubetest.Exit { return kubetest.Exit{} }
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	wl.Run(wctx)
	node, err := kubetest.StartRealNode(c, benchstack.Logf)
	if err != nil {
		return err
	}
	defer func() { _ = node.Stop() }()

	st, err := benchstack.Start(ctx, benchstack.Options{Name: "jobstep", Worker: true, Gateway: true})
	if err != nil {
		return err
	}
	defer st.Close()
	cfg := st.Cfg
	cfg.Cluster = cluster
	cfg.Kubeconfig = c.Kubeconfig()
	cfg.KubeNamespaceTemplate = "bench-{project}"
	cw, clean, err := wire.InitClusterWorker(ctx, cfg, telemetry.New(telemetry.Options{}))
	if err != nil {
		return err
	}
	cwctx, cwcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = cw.Run(cwctx) }()
	defer func() { cwcancel(); <-done; clean() }()

	token, err := st.Bootstrap(ctx, project)
	if err != nil {
		return err
	}
	api, err := gen.NewClientWithResponses(st.URL, gen.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	if err != nil {
		return err
	}
	if err := waitRegistered(ctx, api); err != nil {
		return err
	}
	for _, p := range placements {
		res, err := api.CreatePipelineVersionWithBodyWithResponse(ctx, project, name(p.name), "application/yaml", strings.NewReader(p.yaml))
		if err != nil {
			return err
		}
		if res.StatusCode() != 200 && res.StatusCode() != 201 {
			return fmt.Errorf("push %s: %d %s", p.name, res.StatusCode(), res.Body)
		}
	}
	times := map[string][]time.Duration{}
	for i := -1; i < reps; i++ {
		for _, p := range placements {
			d, err := runOnce(ctx, api, name(p.name))
			if err != nil {
				return fmt.Errorf("%s: %w", p.name, err)
			}
			if i >= 0 { // the first round warms every path up
				times[p.name] = append(times[p.name], d)
			}
		}
		benchstack.Logf("round %d/%d done", i+1, reps)
	}
	report(st, reps, times)
	return nil
}

func name(placement string) string { return "echo-" + strings.ReplaceAll(placement, " ", "-") }

// runOnce starts a run and polls it every 20 ms until it ends: the time
// from the start request to the first poll that sees SUCCEEDED.
func runOnce(ctx context.Context, api *gen.ClientWithResponses, pipeline string) (time.Duration, error) {
	start := time.Now()
	res, err := api.CreateRunWithResponse(ctx, project, nil, gen.CreateRunRequest{Pipeline: &pipeline})
	if err != nil {
		return 0, err
	}
	if res.JSON201 == nil {
		return 0, fmt.Errorf("start: %d %s", res.StatusCode(), res.Body)
	}
	id := res.JSON201.Id
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		r, err := api.GetRunWithResponse(ctx, project, id)
		if err != nil {
			return 0, err
		}
		if r.JSON200 == nil {
			continue
		}
		switch r.JSON200.State {
		case gen.RunStateSUCCEEDED:
			return time.Since(start), nil
		case gen.RunStateFAILED, gen.RunStateCANCELLED, gen.RunStateTERMINATED:
			msg := ""
			if r.JSON200.Status != nil && r.JSON200.Status.Error != nil {
				msg = *r.JSON200.Status.Error
			}
			return 0, fmt.Errorf("run %s ended %s: %s", id, r.JSON200.State, msg)
		}
	}
	return 0, fmt.Errorf("run %s did not end in 2 minutes", id)
}

func waitRegistered(ctx context.Context, api *gen.ClientWithResponses) error {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		res, err := api.GetClusterWithResponse(ctx, cluster)
		if err != nil {
			return err
		}
		if res.StatusCode() == 200 {
			return nil
		}
	}
	return fmt.Errorf("cluster %s never registered", cluster)
}

func report(st *benchstack.Stack, reps int, times map[string][]time.Duration) {
	w := os.Stdout
	fmt.Fprintf(w, "## One-step pipeline end to end, by placement (jobstep)\n\n")
	st.Info.Print(w)
	fmt.Fprintf(w, "\n%d runs per placement, interleaved, after a warm-up round; start request → first poll (every 20 ms) seeing SUCCEEDED.\n\n", reps)
	fmt.Fprintf(w, "| placement | p50 | min–max | p50 ÷ local p50 |\n|---|---|---|---|\n")
	base := median(times["local"])
	for _, p := range placements {
		ts := times[p.name]
		fmt.Fprintf(w, "| %s | %s | %s–%s | %.2f× |\n", p.name, round(median(ts)), round(slices.Min(ts)), round(slices.Max(ts)), float64(median(ts))/float64(base))
	}
}

func median(ts []time.Duration) time.Duration {
	s := slices.Clone(ts)
	slices.Sort(s)
	return s[len(s)/2]
}

func round(d time.Duration) string { return d.Round(10 * time.Millisecond).String() }
