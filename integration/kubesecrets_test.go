package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/stack/kubetest"
)

// A project secret on the real control plane: the attempt's Job reads it
// from a Kubernetes Secret of its own (env from secretKeyRef), owned by
// the Job and deleted when the attempt ends; the test plays the kubelet,
// resolving the reference from the API as a kubelet does, and echoes the
// value into the step's outputs, which Atelier redacts. The value is in
// neither the Job, Temporal history nor REST.
func TestSecretsOnKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("needs the Kubernetes control plane")
	}
	var (
		mu     sync.Mutex
		got    = map[string]string{} // env var → value the "kubelet" resolved
		owners []metav1.OwnerReference
		secret string
		e      *kubeEnv
	)
	play := func(p kubetest.PodRef) kubetest.Exit {
		ctx := context.Background()
		pod, err := e.kube.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return kubetest.Exit{Code: 7, Message: err.Error()}
		}
		mu.Lock()
		defer mu.Unlock()
		out := map[string]string{}
		for _, env := range pod.Spec.Containers[0].Env {
			ref := env.ValueFrom
			if ref == nil || ref.SecretKeyRef == nil {
				continue
			}
			sec, err := e.kube.CoreV1().Secrets(p.Namespace).Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{})
			if err != nil {
				return kubetest.Exit{Code: 8, Message: err.Error()}
			}
			// The runner creates the Secret, then the Job, then makes the
			// Job the Secret's owner (it needs the Job's UID), so a fast
			// pod may start before the owner is written: wait for it.
			for deadline := time.Now().Add(10 * time.Second); len(sec.OwnerReferences) == 0 && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
				if sec, err = e.kube.CoreV1().Secrets(p.Namespace).Get(ctx, ref.SecretKeyRef.Name, metav1.GetOptions{}); err != nil {
					return kubetest.Exit{Code: 8, Message: err.Error()}
				}
			}
			got[env.Name] = string(sec.Data[ref.SecretKeyRef.Key])
			owners, secret = sec.OwnerReferences, sec.Name
			out["echo"] = got[env.Name]
		}
		b, _ := json.Marshal(out)
		return kubetest.Exit{After: 500 * time.Millisecond, Message: string(b)}
	}
	e = newKubeEnv(t, func(string) kubetest.Exit { return kubetest.Exit{} }, true, stackOptions{podScript: play})

	value := fmt.Sprintf("kube-pw-%d", time.Now().UnixNano())
	b, _ := json.Marshal(map[string]string{"value": value})
	code, body := e.raw("PUT", e.path("/secrets/db-password"), b)
	require.Equal(t, 201, code, "%s", body)
	e.createPipeline("kube-secret", fmt.Sprintf(`
steps:
  - name: use
    placement: {cluster: %s}
    container:
      image: busybox
      command: ["sh", "-c", "printf '{\"echo\": \"%%s\"}' \"$DB_PASSWORD\" > $ATELIER_OUTPUTS"]
      secrets: [{name: db-password, env: DB_PASSWORD}]
`, e.cluster))
	id := e.start("kube-secret", nil)
	r := e.waitTerminal(id, 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))

	mu.Lock()
	assert.Equal(t, value, got["DB_PASSWORD"], "the pod's env resolves to the value")
	require.Len(t, owners, 1, "the attempt's Secret is owned by its Job")
	assert.Equal(t, "Job", owners[0].Kind)
	name := secret
	mu.Unlock()
	outputs, _ := stepByName(r, "use").Outputs.(map[string]any)
	assert.Equal(t, "[secret db-password]", outputs["echo"], "outputs are redacted")

	// Gone once the attempt ended.
	require.Eventually(t, func() bool {
		_, err := e.kube.CoreV1().Secrets(e.namespace).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 30*time.Second, 200*time.Millisecond, "the attempt's Secret outlived it")

	// Not in the Job, Temporal or REST.
	jobs, err := e.kube.BatchV1().Jobs(e.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "atelier.dev/run=" + id})
	require.NoError(t, err)
	jb, _ := json.Marshal(jobs)
	assert.NotContains(t, string(jb), value)
	assert.NotContains(t, temporalCLI(t, e.stack, "workflow", "show", "--workflow-id", id, "--output", "json"), value)
	code, body = e.raw("GET", e.path("/runs/%s", id), nil)
	require.Equal(t, 200, code)
	assert.NotContains(t, string(body), value)
}
