package serving

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/inference"
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
