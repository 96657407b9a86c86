package temporaltest_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"os"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/internal/devstack"
)

func dc(kv ...string) []string {
	var out []string
	for _, s := range kv {
		out = append(out, "--dynamic-config-value", s)
	}
	return out
}

func sleepWorkflow(ctx workflow.Context, n int) error {
	for range n {
		if err := workflow.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func oneActivityWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	return workflow.ExecuteActivity(ctx, stampActivity).Get(ctx, nil)
}

var failedOnce = map[string]bool{}

func flakyActivity(ctx context.Context) error {
	id := activity.GetInfo(ctx).WorkflowExecution.ID
	if !failedOnce[id] {
		failedOnce[id] = true
		return errors.New("first attempt fails")
	}
	return nil
}

func retryWorkflow(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{InitialInterval: 10 * time.Millisecond}})
	return workflow.ExecuteActivity(ctx, flakyActivity).Get(ctx, nil)
}

func cpuTicks(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(string(b))
	u, _ := strconv.Atoi(f[13])
	sy, _ := strconv.Atoi(f[14])
	return u + sy
}

func TestExperiment(t *testing.T) {
	if os.Getenv("EXP") == "" {
		t.Skip()
	}
	untuned := []string{"history.transferProcessorMaxPollRPS=20", "history.transferProcessorMaxPollHostRPS=0", "system.enableActivityEagerExecution=false"}
	_ = untuned
	variants := []struct {
		name string
		args []string
	}{
		{"defaults", dc(untuned...)},
		{"tuned", nil},
		{"tuned+timers", dc(`history.timerProcessorMaxTimeShift="10ms"`, "history.timerProcessorMaxPollRPS=10000", "history.timerProcessorMaxPollHostRPS=10000")},
	}
	for _, v := range variants {
		s, err := devstack.StartTemporal(context.Background(), devstack.TemporalOptions{Headless: true, ExtraArgs: v.args}, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.Dial(s.ClientOptions())
		if err != nil {
			t.Fatal(err)
		}
		tq := "exp-" + v.name
		startWorker(t, c, tq, []any{chainWorkflow, sleepWorkflow, oneActivityWorkflow}, []any{stampActivity, flakyActivity})
		roundTrips(t, c, tq, 5)
		var all []time.Duration
		for range 3 {
			all = append(all, roundTrips(t, c, tq, 41)...)
		}
		slices.Sort(all)
		// whole-workflow latency, one activity
		var wf []time.Duration
		for range 30 {
			st := time.Now()
			r, err := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{TaskQueue: tq}, oneActivityWorkflow)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Get(context.Background(), nil); err != nil {
				t.Fatal(err)
			}
			wf = append(wf, time.Since(st))
		}
		slices.Sort(wf)
		st := time.Now()
		r, _ := c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{TaskQueue: tq}, sleepWorkflow, 20)
		if err := r.Get(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		sleepPer := time.Since(st) / 20
		t.Logf("%-20s activity p50=%-10v p95=%-10v | 1-activity workflow p50=%-10v p95=%-10v | sleep(10ms) each=%v",
			v.name, pct(all, .5).Round(100*time.Microsecond), pct(all, .95).Round(100*time.Microsecond),
			pct(wf, .5).Round(100*time.Microsecond), pct(wf, .95).Round(100*time.Microsecond), sleepPer.Round(100*time.Microsecond))
		// retry with 10ms backoff
		st = time.Now()
		r, _ = c.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{TaskQueue: tq}, retryWorkflow)
		if err := r.Get(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
		t.Logf("%-20s retry-once workflow: %v", v.name, time.Since(st).Round(time.Millisecond))
		// idle CPU
		pid := s.PID()
		u0 := cpuTicks(pid)
		time.Sleep(10 * time.Second)
		t.Logf("%-20s idle CPU: %.1f%% of one core", v.name, float64(cpuTicks(pid)-u0)/10/100*100)
		c.Close()
		s.Stop()
	}
}
