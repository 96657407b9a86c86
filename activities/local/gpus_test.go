//go:build unix

package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/activities"
)

const smiOutput = `1, GPU-bbbb, NVIDIA A100-SXM4-80GB, 81920
0, GPU-aaaa, NVIDIA A100-SXM4-80GB, 81920
2, GPU-cccc, NVIDIA L4, [N/A]
`

var (
	a100a = GPU{Index: 0, UUID: "GPU-aaaa", Product: "NVIDIA-A100-SXM4-80GB", MemoryMiB: 81920}
	a100b = GPU{Index: 1, UUID: "GPU-bbbb", Product: "NVIDIA-A100-SXM4-80GB", MemoryMiB: 81920}
	l4    = GPU{Index: 2, UUID: "GPU-cccc", Product: "NVIDIA-L4"}
)

func TestParseNvidiaSMI(t *testing.T) {
	got, err := ParseNvidiaSMI(smiOutput)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]GPU{a100a, a100b, l4}, got); d != "" {
		t.Fatalf("parsed GPUs (-want +got):\n%s", d)
	}
	for _, bad := range []string{"0, GPU-x, only three", "x, GPU-x, NVIDIA L4, 100"} {
		if _, err := ParseNvidiaSMI(bad); err == nil {
			t.Errorf("ParseNvidiaSMI(%q) accepted", bad)
		}
	}
}

// fakeSMI puts an nvidia-smi that prints out (or fails) in a new directory
// and returns that directory.
func fakeSMI(t *testing.T, script string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDetectGPUs(t *testing.T) {
	dir := fakeSMI(t, "cat <<'EOF'\n"+smiOutput+"EOF\n")
	got, err := DetectGPUs(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[2].Product != "NVIDIA-L4" {
		t.Fatalf("detected %+v", got)
	}
	if _, err := DetectGPUs(context.Background(), t.TempDir()); !errors.Is(err, ErrNoNvidiaSMI) {
		t.Fatalf("no nvidia-smi: got %v, want ErrNoNvidiaSMI", err)
	}
	broken := fakeSMI(t, "echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver' >&2; exit 9\n")
	if _, err := DetectGPUs(context.Background(), broken); err == nil || !strings.Contains(err.Error(), "could not communicate") {
		t.Fatalf("failing nvidia-smi: got %v, want its message", err)
	}
}

func TestSelectGPUs(t *testing.T) {
	all := []GPU{a100a, a100b, l4}
	for _, tc := range []struct {
		setting string
		want    []GPU
		err     string
	}{
		{"auto", all, ""},
		{"", all, ""},
		{"none", nil, ""},
		{"2,0,2", []GPU{l4, a100a}, ""},
		{"3", nil, "no GPU 3"},
		{"0,x", nil, `"x" is not an index`},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			got, err := SelectGPUs(tc.setting, all)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %v, want error containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestAcquireWaitsForRelease(t *testing.T) {
	s := NewGPUSet([]GPU{a100a, a100b, l4}, nil)
	ctx := context.Background()
	first, release, err := s.Acquire(ctx, GPURequest{Count: 2, Product: "NVIDIA-A100-SXM4-80GB", Holder: "r1/train"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]GPU{a100a, a100b}, first); d != "" {
		t.Fatalf("first (-want +got):\n%s", d)
	}
	// Any product: the L4 is free, so a one-GPU step need not wait.
	any1, releaseAny, err := s.Acquire(ctx, GPURequest{Count: 1, Holder: "r2/eval"}, nil)
	if err != nil || len(any1) != 1 || any1[0] != l4 {
		t.Fatalf("any product: %+v, %v", any1, err)
	}
	defer releaseAny()

	var mu sync.Mutex
	var reasons []string
	got := make(chan []GPU, 1)
	go func() {
		g, rel, err := s.Acquire(ctx, GPURequest{Count: 1, Product: "NVIDIA-A100-SXM4-80GB", Holder: "r3/tune"}, func(why string) {
			mu.Lock()
			reasons = append(reasons, why)
			mu.Unlock()
		})
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		defer rel()
		got <- g
	}()
	select {
	case g := <-got:
		t.Fatalf("got %+v while both A100s were held", g)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	release() // idempotent
	select {
	case g := <-got:
		if len(g) != 1 || g[0] != a100a {
			t.Fatalf("after release got %+v", g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter not woken by release")
	}
	mu.Lock()
	defer mu.Unlock()
	want := "waiting for local GPUs: needs 1 NVIDIA-A100-SXM4-80GB GPUs, 0 of 2 free on this machine (held: GPU 0 by r1/train, GPU 1 by r1/train)"
	if len(reasons) != 1 || reasons[0] != want {
		t.Fatalf("waiting reasons %q, want [%q]", reasons, want)
	}
}

func TestAcquireCancelled(t *testing.T) {
	s := NewGPUSet([]GPU{l4}, nil)
	_, release, err := s.Acquire(context.Background(), GPURequest{Count: 1, Holder: "a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := s.Acquire(ctx, GPURequest{Count: 1, Holder: "b"}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's error", err)
	}
}

func TestAcquireUnsatisfiable(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  *GPUSet
		req  GPURequest
		want string
	}{
		{"no GPUs", NewGPUSet(nil, ErrNoNvidiaSMI), GPURequest{Count: 1},
			"the step needs 1 GPU(s) but this worker's machine has 0 (no GPUs: nvidia-smi not found on PATH): install the NVIDIA driver"},
		{"nil set", nil, GPURequest{Count: 2}, "needs 2 GPU(s) but this worker's machine has 0"},
		{"too many", NewGPUSet([]GPU{l4}, nil), GPURequest{Count: 2}, "needs 2 GPU(s) but this worker's machine has 1"},
		{"wrong product", NewGPUSet([]GPU{a100a, l4}, nil), GPURequest{Count: 1, Product: "NVIDIA-H100"},
			"needs 1 NVIDIA-H100 GPU(s) but this worker's machine has 0 (it has 2 GPU(s): NVIDIA-A100-SXM4-80GB, NVIDIA-L4)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tc.set.Acquire(context.Background(), tc.req, nil)
			var u *UnsatisfiableGPUError
			if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an UnsatisfiableGPUError containing %q", err, tc.want)
			}
		})
	}
}

// A step sees the devices it was given, and a step without GPUs sees none
// on a machine that has some.
func TestRunnerSetsCUDAVisibleDevices(t *testing.T) {
	var mu sync.Mutex
	var progress []activities.StepProgress
	h := newHarness(t, WithGPUs(NewGPUSet([]GPU{a100a, a100b, l4}, nil)),
		WithProgressReporter(func(_ context.Context, p activities.StepProgress) error {
			mu.Lock()
			progress = append(progress, p)
			mu.Unlock()
			return nil
		}))
	show := `printf '{"cuda":"%s","set":"%s"}' "$CUDA_VISIBLE_DEVICES" "${CUDA_VISIBLE_DEVICES+yes}" > "$ATELIER_OUTPUTS"`

	req := request("sh", "-c", show)
	req.GPU, req.GPUType = 1, "NVIDIA-L4"
	res, err := h.run(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Outputs["cuda"] != "2" {
		t.Fatalf("L4 step saw CUDA_VISIBLE_DEVICES=%v, want 2", res.Outputs["cuda"])
	}

	req = request("sh", "-c", show)
	req.Attempt, req.GPU = 2, 2
	if res, err = h.run(req); err != nil {
		t.Fatal(err)
	}
	if res.Outputs["cuda"] != "0,1" {
		t.Fatalf("2-GPU step saw %v, want 0,1 (released devices are reused)", res.Outputs["cuda"])
	}

	req = request("sh", "-c", show)
	req.Attempt = 3
	if res, err = h.run(req); err != nil {
		t.Fatal(err)
	}
	if res.Outputs["cuda"] != "" || res.Outputs["set"] != "yes" {
		t.Fatalf("CPU step saw %v (set=%v), want an empty CUDA_VISIBLE_DEVICES", res.Outputs["cuda"], res.Outputs["set"])
	}

	req = request("sh", "-c", show)
	req.Attempt, req.GPU = 4, 4
	_, err = h.run(req)
	appErr := appError(t, err, activities.ErrTypeInvalidStep)
	if !strings.Contains(appErr.Error(), "needs 4 GPU(s) but this worker's machine has 3") {
		t.Fatalf("4-GPU step: %v", appErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(progress) != 0 {
		t.Fatalf("no step waited, yet progress was reported: %+v", progress)
	}
}

// Without a GPU set (a machine with none), CPU steps get no
// CUDA_VISIBLE_DEVICES at all: nothing to hide.
func TestRunnerWithoutGPUsLeavesCUDAUnset(t *testing.T) {
	h := newHarness(t)
	res, err := h.run(request("sh", "-c", `printf '{"set":"%s"}' "${CUDA_VISIBLE_DEVICES+yes}" > "$ATELIER_OUTPUTS"`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outputs["set"] != "" {
		t.Fatalf("CUDA_VISIBLE_DEVICES set on a machine without GPUs")
	}
}

// A step whose devices are taken waits, heartbeating, says why, and runs
// once they are free.
func TestRunnerWaitsForGPUs(t *testing.T) {
	set := NewGPUSet([]GPU{l4}, nil)
	reported := make(chan activities.StepProgress, 4)
	h := newHarness(t, WithGPUs(set), WithProgressReporter(func(_ context.Context, p activities.StepProgress) error {
		reported <- p
		return nil
	}))
	_, release, err := set.Acquire(context.Background(), GPURequest{Count: 1, Holder: "other-run/train"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := request("sh", "-c", `printf '{"cuda":"%s"}' "$CUDA_VISIBLE_DEVICES" > "$ATELIER_OUTPUTS"`)
	req.GPU = 1
	type result struct {
		res activities.ContainerResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := h.run(req)
		done <- result{res, err}
	}()
	select {
	case p := <-reported:
		if p.Step != "train" || p.Attempt != 1 || !strings.Contains(p.Message, "GPU 2 by other-run/train") {
			t.Fatalf("waiting report %+v", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no waiting reason reported")
	}
	h.firstBeat(5 * time.Second) // the wait heartbeats
	release()
	r := <-done
	if r.err != nil || r.res.Outputs["cuda"] != "2" {
		t.Fatalf("after release: %+v, %v", r.res, r.err)
	}
	if p := <-reported; p.Message != "" {
		t.Fatalf("the waiting reason was not cleared: %+v", p)
	}
}

// The step's timeout covers its wait for GPUs, as a Job's
// activeDeadlineSeconds covers its pending time.
func TestRunnerGPUWaitCountsAgainstTimeout(t *testing.T) {
	set := NewGPUSet([]GPU{l4}, nil)
	h := newHarness(t, WithGPUs(set), WithProgressReporter(func(context.Context, activities.StepProgress) error { return nil }))
	_, release, err := set.Acquire(context.Background(), GPURequest{Count: 1, Holder: "other"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	req := request("true")
	req.GPU, req.Timeout = 1, 200*time.Millisecond
	_, err = h.run(req)
	appErr := appError(t, err, activities.ErrTypeStepTimeout)
	if !strings.Contains(appErr.Error(), "waiting for local GPUs") {
		t.Fatalf("got %v", appErr)
	}
}
