package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GPU is one NVIDIA device of the worker's machine, as nvidia-smi lists it.
type GPU struct {
	Index int
	UUID  string
	// Product is the name as the nvidia.com/gpu.product node label spells
	// it (GPU feature discovery replaces spaces with '-'), so a step's
	// gpuType means the same locally and on Kubernetes:
	// "NVIDIA A100-SXM4-80GB" → "NVIDIA-A100-SXM4-80GB".
	Product   string
	MemoryMiB int64
}

// nvidiaSMIQuery asks for one CSV line per GPU.
var nvidiaSMIQuery = []string{"--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"}

// ErrNoNvidiaSMI means the machine has no nvidia-smi on PATH: no NVIDIA
// driver, so no GPUs for local steps.
var ErrNoNvidiaSMI = errors.New("nvidia-smi not found on PATH")

// DetectGPUs lists the machine's GPUs by running nvidia-smi (found on
// path, a PATH-style list; "" means the worker's PATH). No nvidia-smi is
// ErrNoNvidiaSMI; an nvidia-smi that fails (driver not loaded) is an
// error saying what it printed. The caller decides whether that is fatal:
// the worker runs on without GPUs and says why.
func DetectGPUs(ctx context.Context, path string) ([]GPU, error) {
	if path == "" {
		path = os.Getenv("PATH")
	}
	prog, err := lookPath("nvidia-smi", path, "")
	if err != nil {
		return nil, ErrNoNvidiaSMI
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, nvidiaSMIQuery...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String() + " " + out.String())
		return nil, fmt.Errorf("%s %s: %w: %s", prog, strings.Join(nvidiaSMIQuery, " "), err, msg)
	}
	return ParseNvidiaSMI(out.String())
}

// ParseNvidiaSMI reads the CSV nvidia-smi prints for nvidiaSMIQuery.
func ParseNvidiaSMI(csv string) ([]GPU, error) {
	var gpus []GPU
	for n, line := range strings.Split(csv, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("nvidia-smi line %d: want 4 fields (index, uuid, name, memory.total), got %q", n+1, line)
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi line %d: index %q: %w", n+1, f[0], err)
		}
		mem, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil {
			mem = 0 // "[N/A]" on some devices: memory is informative only
		}
		gpus = append(gpus, GPU{Index: idx, UUID: f[1], Product: ProductLabel(f[2]), MemoryMiB: mem})
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	return gpus, nil
}

// ProductLabel spells an nvidia-smi product name the way the
// nvidia.com/gpu.product label does.
func ProductLabel(name string) string { return strings.Join(strings.Fields(name), "-") }

// GPUSet hands the machine's GPUs to local steps, each device to one step
// at a time, as the device plugin does for pods. It is the worker's own
// bookkeeping: steps on one machine share its devices, whatever their
// project (GPU quotas apply to Kubernetes clusters; see the package doc).
type GPUSet struct {
	mu      sync.Mutex
	gpus    []GPU
	holders map[int]string // device index → who holds it
	freed   chan struct{}  // closed and replaced whenever a device is released
	// detectErr is why the set is empty, for the error a GPU step gets.
	detectErr error
}

// NewGPUSet returns the set of gpus; why explains an empty set (e.g.
// ErrNoNvidiaSMI) in the error a step that needs GPUs gets.
func NewGPUSet(gpus []GPU, why error) *GPUSet {
	return &GPUSet{gpus: slices.Clone(gpus), holders: map[int]string{}, freed: make(chan struct{}), detectErr: why}
}

// GPUs returns the devices of the set.
func (s *GPUSet) GPUs() []GPU {
	if s == nil {
		return nil
	}
	return slices.Clone(s.gpus)
}

// GPURequest is what a step asks of the set.
type GPURequest struct {
	Count int
	// Product restricts the devices to one product (label spelling); ""
	// takes any.
	Product string
	// Holder names the step in waiting messages: "<run>/<step>".
	Holder string
}

// Acquire waits until req.Count matching devices are free, takes them and
// returns them (lowest indices first) with the function that gives them
// back. While it waits it calls waiting with why, whenever the reason
// changes. A request the machine can never satisfy (too few devices of
// that product, or none at all) is an *UnsatisfiableGPUError at once; a
// cancelled ctx returns ctx.Err().
func (s *GPUSet) Acquire(ctx context.Context, req GPURequest, waiting func(why string)) ([]GPU, func(), error) {
	if s == nil {
		s = NewGPUSet(nil, ErrNoNvidiaSMI)
	}
	last := ""
	for {
		s.mu.Lock()
		match, free := s.matchLocked(req)
		if len(match) < req.Count {
			s.mu.Unlock()
			return nil, nil, s.unsatisfiable(req, match)
		}
		if len(free) >= req.Count {
			got := free[:req.Count]
			for _, g := range got {
				s.holders[g.Index] = req.Holder
			}
			s.mu.Unlock()
			var once sync.Once
			return got, func() { once.Do(func() { s.release(got) }) }, nil
		}
		why := s.waitReason(req, match, len(free))
		freed := s.freed
		s.mu.Unlock()
		if why != last && waiting != nil {
			waiting(why)
			last = why
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-freed:
		}
	}
}

// Check reports whether the machine could ever satisfy req: nil, or an
// *UnsatisfiableGPUError saying what it has. It takes nothing.
func (s *GPUSet) Check(req GPURequest) error {
	if s == nil {
		s = NewGPUSet(nil, ErrNoNvidiaSMI)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if match, _ := s.matchLocked(req); len(match) < req.Count {
		return s.unsatisfiable(req, match)
	}
	return nil
}

// matchLocked returns the devices of req's product, and those of them no
// one holds; s.mu is held.
func (s *GPUSet) matchLocked(req GPURequest) (match, free []GPU) {
	for _, g := range s.gpus {
		if req.Product != "" && g.Product != req.Product {
			continue
		}
		match = append(match, g)
		if _, held := s.holders[g.Index]; !held {
			free = append(free, g)
		}
	}
	return match, free
}

func (s *GPUSet) unsatisfiable(req GPURequest, match []GPU) *UnsatisfiableGPUError {
	return &UnsatisfiableGPUError{Want: req.Count, Product: req.Product, Have: match, All: s.gpus, Why: s.detectErr}
}

// waitReason says why req waits; s.mu is held.
func (s *GPUSet) waitReason(req GPURequest, match []GPU, free int) string {
	var held []string
	for _, g := range match {
		if h, ok := s.holders[g.Index]; ok {
			held = append(held, fmt.Sprintf("GPU %d by %s", g.Index, h))
		}
	}
	what := "GPUs"
	if req.Product != "" {
		what = req.Product + " GPUs"
	}
	return fmt.Sprintf("waiting for local GPUs: needs %d %s, %d of %d free on this machine (held: %s)",
		req.Count, what, free, len(match), strings.Join(held, ", "))
}

func (s *GPUSet) release(gpus []GPU) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, g := range gpus {
		delete(s.holders, g.Index)
	}
	close(s.freed)
	s.freed = make(chan struct{})
}

// UnsatisfiableGPUError is a GPU request this machine can never satisfy.
type UnsatisfiableGPUError struct {
	Want    int
	Product string
	Have    []GPU // devices of that product
	All     []GPU
	Why     error // why the machine has no GPUs at all, if known
	// Subject is what needs the GPUs ("" for "the step"); Remedy ends the
	// message ("" for the advice to a step).
	Subject, Remedy string
}

func (e *UnsatisfiableGPUError) Error() string {
	what := "GPU(s)"
	if e.Product != "" {
		what = e.Product + " GPU(s)"
	}
	var b strings.Builder
	subject := e.Subject
	if subject == "" {
		subject = "the step needs"
	}
	fmt.Fprintf(&b, "%s %d %s but this worker's machine has %d", subject, e.Want, what, len(e.Have))
	switch {
	case len(e.All) == 0 && e.Why != nil:
		fmt.Fprintf(&b, " (no GPUs: %v)", e.Why)
	case len(e.All) == 0:
		b.WriteString(" (no GPUs)")
	case e.Product != "":
		var products []string
		for _, g := range e.All {
			if !slices.Contains(products, g.Product) {
				products = append(products, g.Product)
			}
		}
		fmt.Fprintf(&b, " (it has %d GPU(s): %s)", len(e.All), strings.Join(products, ", "))
	}
	remedy := e.Remedy
	if remedy == "" {
		remedy = "install the NVIDIA driver on the worker's machine, ask for fewer GPUs or another gpuType, or place the step on a Kubernetes cluster (placement)"
	}
	b.WriteString(": " + remedy)
	return b.String()
}

// visibleDevices is the CUDA_VISIBLE_DEVICES value for gpus: their
// indices, in order ("" hides every device).
func visibleDevices(gpus []GPU) string {
	idx := make([]string, len(gpus))
	for i, g := range gpus {
		idx[i] = strconv.Itoa(g.Index)
	}
	return strings.Join(idx, ",")
}

// SelectGPUs applies the worker's --local-gpus setting to the detected
// devices: "auto" (or "") keeps them all, "none" none, and a list of
// indices ("0,2") those only. An index the machine does not have is an
// error naming it.
func SelectGPUs(setting string, detected []GPU) ([]GPU, error) {
	switch setting {
	case "", "auto":
		return detected, nil
	case "none":
		return nil, nil
	}
	var out []GPU
	for _, f := range strings.Split(setting, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("local GPUs %q: want auto, none or device indices like 0,2; %q is not an index", setting, f)
		}
		at := slices.IndexFunc(detected, func(g GPU) bool { return g.Index == i })
		if at < 0 {
			return nil, fmt.Errorf("local GPUs %q: this machine has no GPU %d (nvidia-smi lists %d device(s))", setting, i, len(detected))
		}
		if !slices.ContainsFunc(out, func(g GPU) bool { return g.Index == i }) {
			out = append(out, detected[at])
		}
	}
	return out, nil
}
