package serving

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/platform/launch/grant"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
)

// A revision serving a registered model fetches it in an init container
// (the launcher's fetch) with a grant of its own in a Secret the
// Deployment owns; the engine loads it from the shared volume. The grant
// reads the version only. A worker without the launcher's settings says
// what it lacks.
func TestRevisionFetchesItsRegisteredModel(t *testing.T) {
	spec := vllmSpec()
	spec.Model = inference.Model{Ref: "sentiment@champion", Registered: &inference.RegisteredModel{
		Model: "sentiment", Version: 3, Alias: "champion", Digest: "sha256:ab0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd", Size: 42}}
	req := activities.ApplyServingRevisionRequest{ServingRevisionRef: ref(1), Spec: spec, Replicas: 1}

	_, err := New(Clients{Kube: fake.NewClientset()}).ApplyRevision(ctx, req)
	wantInvalid(t, err, "cannot fetch it into a pod")

	key, err := secretbox.NewLocalKeyURL()
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.Open(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset()
	s := New(Clients{Kube: kube}, WithModelFetch("atelier:dev", "http://gw:8080", box))
	if _, err := s.ApplyRevision(ctx, req); err != nil {
		t.Fatal(err)
	}
	name := RevisionName("p", "llama", 1)
	d, err := kube.AppsV1().Deployments("atelier-p").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ps := d.Spec.Template.Spec
	if len(ps.InitContainers) != 1 || !cmp.Equal(ps.InitContainers[0].Command, []string{"/atelier-launcher", "fetch"}) || ps.InitContainers[0].Image != "atelier:dev" {
		t.Fatalf("init containers %+v", ps.InitContainers)
	}
	var fetch launch.Spec
	for _, e := range ps.InitContainers[0].Env {
		if e.Name == launch.SpecEnv {
			if err := json.Unmarshal([]byte(e.Value), &fetch); err != nil {
				t.Fatal(err)
			}
		}
		if e.Name == launch.GrantEnv && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef.Name != name+"-secrets") {
			t.Errorf("grant %+v: from the revision's Secret", e)
		}
	}
	if len(fetch.Inputs) != 1 || fetch.Inputs[0].Digest != spec.Model.Registered.Digest || fetch.Gateway != "http://gw:8080" {
		t.Errorf("fetch spec %+v", fetch)
	}
	c := ps.Containers[0]
	if want := []string{"--model", ModelDir, "--served-model-name", "sentiment"}; !cmp.Equal(c.Args[:4], want) {
		t.Errorf("engine args %q, want the fetched path first: %q", c.Args, want)
	}
	if len(c.VolumeMounts) != 1 || !c.VolumeMounts[0].ReadOnly || c.VolumeMounts[0].MountPath != launch.Dir {
		t.Errorf("engine mounts %+v", c.VolumeMounts)
	}
	sec, err := kube.CoreV1().Secrets("atelier-p").Get(ctx, name+"-secrets", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.OwnerReferences) != 1 || sec.OwnerReferences[0].Name != name {
		t.Errorf("owners %+v: the revision's Deployment", sec.OwnerReferences)
	}
	g, err := grant.Open(ctx, box, string(sec.Data[launch.GrantKey]), s.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if g.Endpoint != "llama" || g.Revision != 1 || g.Writes() || !g.Reads(spec.Model.Registered.Digest) {
		t.Errorf("grant %+v: reads the version, writes nothing", g)
	}
	if res, err := s.ApplyRevision(ctx, req); err != nil || res.Changed {
		t.Errorf("second apply: %+v, %v; want no change (the grant is in the Secret, not the template)", res, err)
	}
}

// fakeVault holds project secrets; err, when set, is every answer.
type fakeVault struct {
	values map[string]string
	err    error
}

func (v *fakeVault) Resolve(_ context.Context, _ string, names []string) (map[string]string, error) {
	if v.err != nil {
		return nil, v.err
	}
	out := map[string]string{}
	for _, n := range names {
		val, ok := v.values[n]
		if !ok {
			return nil, fmt.Errorf("secret %q: %w", n, catalog.ErrNotFound)
		}
		out[n] = val
	}
	return out, nil
}

// A revision's secrets reach its engine from its Secret; applying again
// rewrites nothing; a vault that cannot answer (or a secret deleted since)
// leaves a serving revision with the values its pods run with, while a new
// revision names the missing secret; deleting the revision deletes its
// Secret.
func TestRevisionSecrets(t *testing.T) {
	kube := fake.NewClientset()
	vault := &fakeVault{values: map[string]string{"hf-token": "hf_s3cr3t_value"}}
	s := New(Clients{Kube: kube}, WithSecrets(vault))
	spec := vllmSpec()
	spec.Secrets = []inference.SecretEnv{{Name: "hf-token", Env: "HF_TOKEN"}}
	req := activities.ApplyServingRevisionRequest{ServingRevisionRef: ref(1), Spec: spec, Replicas: 1}
	if _, err := s.ApplyRevision(ctx, req); err != nil {
		t.Fatal(err)
	}
	name := RevisionName("p", "llama", 1)
	d, _ := kube.AppsV1().Deployments("atelier-p").Get(ctx, name, metav1.GetOptions{})
	b, _ := json.Marshal(d)
	if strings.Contains(string(b), "hf_s3cr3t_value") || !strings.Contains(string(b), `"name":"HF_TOKEN","valueFrom"`) {
		t.Errorf("the Deployment names the secret, never holds its value: %s", b)
	}
	sec, err := kube.CoreV1().Secrets("atelier-p").Get(ctx, name+"-secrets", metav1.GetOptions{})
	if err != nil || string(sec.Data["hf-token"]) != "hf_s3cr3t_value" {
		t.Fatalf("secret %+v, %v", sec, err)
	}

	kube.ClearActions()
	vault.err = errors.New("vault sealed")
	if res, err := s.ApplyRevision(ctx, req); err != nil || res.Changed {
		t.Fatalf("apply with the vault down: %+v, %v; want the serving revision kept as it is", res, err)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "secrets" {
			t.Errorf("the Secret was rewritten: %v", a)
		}
	}
	vault.err = nil
	delete(vault.values, "hf-token")
	if _, err := s.ApplyRevision(ctx, req); err != nil {
		t.Errorf("a secret deleted since: %v; want the serving revision kept", err)
	}
	_, err = s.ApplyRevision(ctx, activities.ApplyServingRevisionRequest{ServingRevisionRef: ref(2), Spec: spec, Replicas: 1})
	wantInvalid(t, err, `"hf-token"`)

	res, err := s.DeleteRevision(ctx, ref(1))
	if err != nil || !slices.Contains(res.Deleted, "secret/"+name+"-secrets") {
		t.Errorf("delete: %+v, %v; want the Secret deleted", res, err)
	}
}

// A failing init container (a model fetch refused) is the replica's
// waiting reason, with its last words.
func TestInitTrouble(t *testing.T) {
	p := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{
		Name:                 "atelier-launcher",
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reasonCrashLoop}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: "the gateway refused to sign: 401"}},
	}}}}
	reason, msg, ok := initTrouble(p)
	if !ok || reason != reasonCrashLoop || !strings.Contains(msg, "refused to sign") {
		t.Errorf("initTrouble = %q, %q, %v", reason, msg, ok)
	}
	if _, _, ok := initTrouble(&corev1.Pod{}); ok {
		t.Error("no init container, no trouble")
	}
}
