package integration

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// An inference endpoint on the local runtime, driven through REST: created
// without a cluster, its workflow's activities run on the stack's own
// worker, which starts examples/modelserver (standing in for vllm through
// --local-engine) as the replica process, as the step user when the tests
// run as root. Revision 1 becomes ready and serves completions; the
// delete stops the process.
func TestEndpointOnTheLocalRuntime(t *testing.T) {
	engine := modelserverBinary(t)
	s := newStack(t, stackOptions{localEngines: map[string]string{"vllm": engine}})
	spec := map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": "vllm/vllm-openai:v0.9.1",
		"args": []string{"--startup-delay", "500ms"}, "replicas": map[string]any{"min": 1, "max": 2},
		"rollout": map[string]any{"gates": map[string]any{"maxErrorRate": 1, "analysisInterval": "1s"}}}
	s.createEndpoint(t, "", spec)

	v := s.waitEndpoint(t, 90*time.Second, "served revision 1", func(v gen.Endpoint) bool {
		if v.Stable != 1 || v.Rollout != nil {
			return false
		}
		for _, o := range v.Observed {
			if o.Revision == 1 && o.Ready == 1 {
				return true
			}
		}
		return false
	})
	require.NotNil(t, v.TrafficMode)
	require.Equal(t, "proxy", *v.TrafficMode)

	// The replica serves where its log says it listens.
	logPath := filepath.Join(s.cfg.DataDir, "endpoints", s.project, "chat", "r1", "chat-r1-0.log")
	addr := waitFile(t, logPath, 10*time.Second)
	i := strings.Index(addr, "msg=listening addr=")
	require.GreaterOrEqual(t, i, 0, "log: %s", addr)
	addr = strings.Fields(addr[i+len("msg=listening addr="):])[0]
	resp, err := http.Post("http://"+addr+"/v1/completions", "application/json", strings.NewReader(`{"model":"tiny","prompt":"hi"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)

	s.deleteEndpoint(t)
	require.Eventually(t, func() bool {
		_, err := http.Get("http://" + addr + "/health")
		return err != nil
	}, 30*time.Second, 100*time.Millisecond, "the replica still answers after the delete")
}

// modelserverBinary builds examples/modelserver into a directory the step
// user can read, for --local-engine.
func modelserverBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(stepDataDir(t), "modelserver")
	out, err := exec.Command("go", "build", "-o", bin, "../examples/modelserver/cmd/modelserver").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}
