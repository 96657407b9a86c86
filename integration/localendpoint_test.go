package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/activities"
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

// An endpoint's secrets on the local runtime: the replica's engine
// (examples/modelserver with -require-env, as an engine that needs
// HF_TOKEN) starts only with the secret in its environment, put there by
// the worker; the value is nowhere in the endpoint's REST answers or its
// workflow's history (`temporal workflow show`). A secret the project
// lacks keeps the replica waiting with the reason. (On a cluster:
// realnode_endpoint_test.go.)
func TestEndpointSecretsOnTheLocalRuntime(t *testing.T) {
	engine := modelserverBinary(t)
	s := newStack(t, stackOptions{localEngines: map[string]string{"vllm": engine}})
	s.cleanupEndpoint(t)
	value := fmt.Sprintf("hf_%d_Xq7Lm2", time.Now().UnixNano())
	b, _ := json.Marshal(map[string]string{"value": value})
	code, body := s.raw("PUT", s.path("/secrets/hf-token"), b)
	require.Equal(t, 201, code, "%s", body)

	spec := map[string]any{"backend": "vllm", "model": map[string]any{"name": "tiny"}, "image": "vllm/vllm-openai:v0.9.1",
		"args": []string{"--startup-delay", "200ms", "--require-env", "HF_TOKEN"}, "replicas": map[string]any{"min": 1, "max": 1},
		"secrets": []map[string]any{{"name": "hf-token", "env": "HF_TOKEN"}},
		"rollout": map[string]any{"gates": map[string]any{"maxErrorRate": 1, "analysisInterval": "1s"}}}

	s.createEndpoint(t, "", spec)
	s.waitEndpoint(t, 90*time.Second, "served revision 1 (the engine had its secret)", func(v gen.Endpoint) bool {
		return v.Stable == 1 && v.Rollout == nil && len(v.Observed) > 0 && v.Observed[0].Ready == 1
	})
	pid, err := os.ReadFile(filepath.Join(s.cfg.DataDir, "endpoints", s.project, "chat", "r1", "chat-r1-0.pid"))
	require.NoError(t, err)
	environ, err := os.ReadFile(filepath.Join("/proc", strings.TrimSpace(string(pid)), "environ"))
	require.NoError(t, err)
	assert.Contains(t, strings.Split(string(environ), "\x00"), "HF_TOKEN="+value, "the replica's process has the secret")

	code, body = s.raw("GET", s.path("/endpoints/chat"), nil)
	require.Equal(t, 200, code)
	assert.NotContains(t, string(body), value)
	assert.Contains(t, string(body), `"secrets":[{"name":"hf-token","env":"HF_TOKEN"}]`, "the spec names the secret")
	show := payloadsDecoded(t, temporalCLI(t, s, "workflow", "show", "--workflow-id", activities.EndpointWorkflowID(s.project, "chat"), "--output", "json"))
	assert.NotContains(t, show, value, "the endpoint's history never holds the value")
	assert.Contains(t, show, "hf-token")

	// A secret the project does not have: the new revision's replica
	// waits, saying why, and the stable one keeps serving.
	spec["secrets"] = []map[string]any{{"name": "nope", "env": "HF_TOKEN"}}
	s.updateEndpoint(t, spec)
	s.waitEndpoint(t, 30*time.Second, "say why revision 2 cannot start", func(v gen.Endpoint) bool {
		for _, o := range v.Observed {
			if o.Revision == 2 && strings.Contains(val(o.Waiting), "nope") {
				return true
			}
		}
		return false
	})
	s.deleteEndpoint(t)
}
