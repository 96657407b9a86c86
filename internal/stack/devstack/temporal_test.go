package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
	"gopkg.in/yaml.v3"
)

func startForTest(t *testing.T, opts TemporalOptions) *TemporalServer {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a Temporal dev server; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	s, err := StartTemporal(ctx, opts, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

func dial(t *testing.T, s *TemporalServer) client.Client {
	t.Helper()
	c, err := client.Dial(s.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestStartTemporalPersistsAcrossRestart covers the dev-stack shape: a state
// dir, the UI on, a clean Stop, and workflows surviving a restart.
func TestStartTemporalPersistsAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "temporal.log")
	s1 := startForTest(t, TemporalOptions{StateDir: dir, LogFile: logFile})
	if s1.UIURL() == "" {
		t.Fatal("UI enabled but UIURL is empty")
	}
	resp, err := http.Get(s1.UIURL())
	if err != nil {
		t.Fatalf("UI: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("UI: %s", resp.Status)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// No worker: the workflow just stays open, which is what we check after
	// the restart.
	run, err := dial(t, s1).ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: "persist-1", TaskQueue: "nobody-polls",
	}, "SomeWorkflow")
	if err != nil {
		t.Fatal(err)
	}
	stopStart := time.Now()
	if err := s1.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	t.Logf("graceful stop took %v", time.Since(stopStart).Round(time.Millisecond))
	select {
	case <-s1.Exited():
	default:
		t.Fatal("Exited not closed after Stop")
	}
	if err := s1.Stop(); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "temporal.db")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(logFile); !strings.Contains(string(b), "server start-dev") {
		t.Errorf("log file lacks the start line:\n%s", b)
	}

	s2 := startForTest(t, TemporalOptions{StateDir: dir, Headless: true})
	desc, err := dial(t, s2).DescribeWorkflowExecution(ctx, "persist-1", run.GetRunID())
	if err != nil {
		t.Fatalf("workflow lost across restart: %v", err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("status after restart: %v", st)
	}
}

// TestEnsureSearchAttributesOnExistingNamespace covers the operator-service
// path taken when the namespace predates the attributes (the CLI's
// --search-attribute only applies to namespaces it creates).
func TestEnsureSearchAttributesOnExistingNamespace(t *testing.T) {
	s := startForTest(t, TemporalOptions{Headless: true})
	c := dial(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: "legacy", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // second round: idempotent
		if err := ensureTemporalSearchAttributes(ctx, c, "legacy"); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "legacy"})
	if err != nil {
		t.Fatal(err)
	}
	for name := range TemporalSearchAttributes {
		if list.GetCustomAttributes()[name] != enumspb.INDEXED_VALUE_TYPE_KEYWORD {
			t.Errorf("%s missing on legacy namespace: %v", name, list.GetCustomAttributes())
		}
	}
}

// TestStartTemporalFailureShowsLog: a startup failure must say why, i.e.
// carry the server's own output.
func TestStartTemporalFailureShowsLog(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the temporal CLI")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	_, err = StartTemporal(context.Background(), TemporalOptions{Port: port, Headless: true, StartTimeout: time.Minute}, nil)
	if err == nil {
		t.Fatal("started on a busy port")
	}
	if !strings.Contains(err.Error(), "server log tail") || !strings.Contains(err.Error(), "port") {
		t.Fatalf("error lacks the server's explanation: %v", err)
	}
	t.Logf("error (as users see it): %v", err)
}

// TestDynamicConfigYAMLInSync keeps the documented copy for operators equal
// to what the dev stack actually runs.
func TestDynamicConfigYAMLInSync(t *testing.T) {
	b, err := os.ReadFile("../../../deploy/dev/temporal-dynamic-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file map[string][]struct {
		Value any `yaml:"value"`
	}
	if err := yaml.Unmarshal(b, &file); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, dc := range TunedDynamicConfig {
		seen[dc.Key] = true
		var want any
		if err := json.Unmarshal([]byte(dc.Value), &want); err != nil {
			t.Errorf("%s: value %s is not JSON: %v", dc.Key, dc.Value, err)
			continue
		}
		vals := file[dc.Key]
		if len(vals) != 1 || fmt.Sprint(vals[0].Value) != fmt.Sprint(want) {
			t.Errorf("%s: yaml has %+v, TunedDynamicConfig has %v", dc.Key, vals, want)
		}
	}
	for k := range file {
		if !seen[k] {
			t.Errorf("%s is in the yaml but not in TunedDynamicConfig", k)
		}
	}
}
