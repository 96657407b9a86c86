package benchstack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/internal/stack/devstack"
)

// Info is what a report says about where it was measured.
type Info struct {
	Command     string // how to rerun it
	Go          string
	OS          string
	CPU         string
	NumCPU      int
	GOMAXPROCS  int
	LoadAvg     string // at start, from /proc/loadavg
	TemporalCLI string // pinned version and `temporal --version`
	Postgres    string // server_version
	Date        string
}

// CommandLine is the go run invocation that reproduces this run.
func CommandLine(name string) string {
	parts := []string{"go", "run", "./bench/" + name}
	for _, a := range os.Args[1:] {
		parts = append(parts, shellQuote(a))
	}
	return strings.Join(parts, " ")
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_=./:,", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func collectInfo(ctx context.Context) Info {
	in := collectInfoNoTemporal()
	in.TemporalCLI = devstack.TemporalCLIVersion
	cctx, cancel := context.WithTimeout(ctx, 30*time.Minute) // may build it
	defer cancel()
	if bin, err := devstack.EnsureTemporalCLI(cctx, Logf); err == nil {
		vctx, vcancel := context.WithTimeout(ctx, 30*time.Second)
		defer vcancel()
		if out, err := exec.CommandContext(vctx, bin, "--version").Output(); err == nil {
			in.TemporalCLI += " (`" + strings.TrimSpace(string(out)) + "`)"
		}
	}
	return in
}

func collectInfoNoTemporal() Info {
	in := Info{
		TemporalCLI: "(not used)",
		Go:          runtime.Version(),
		OS:          runtime.GOOS + "/" + runtime.GOARCH,
		CPU:         cpuModel(),
		NumCPU:      runtime.NumCPU(),
		GOMAXPROCS:  runtime.GOMAXPROCS(0),
		Date:        time.Now().UTC().Format(time.RFC3339),
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			in.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	return in
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// Print writes the machine section of a report.
func (in Info) Print(w io.Writer) {
	fmt.Fprintf(w, "Command: `%s`\n\n", in.Command)
	fmt.Fprintf(w, "Machine: %s, %s, NumCPU=%d, GOMAXPROCS=%d, loadavg at start %s\n\n",
		in.OS, in.CPU, in.NumCPU, in.GOMAXPROCS, in.LoadAvg)
	fmt.Fprintf(w, "Versions: %s, temporal CLI %s, Postgres %s; %s\n\n", in.Go, in.TemporalCLI, in.Postgres, in.Date)
}
