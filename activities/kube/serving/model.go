package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/launch"
	"github.com/atelier-ml/atelier/internal/platform/launch/grant"
	"github.com/atelier-ml/atelier/internal/platform/redact"
)

// A revision serving a registered model (model.registered) gets it the way
// a step gets its inputs (package launch): an init container runs the
// launcher's `fetch` from the launcher image, which downloads the
// version's bytes into an emptyDir with URLs the gateway signs for the
// revision's grant (in a Secret of the revision's, owned by its
// Deployment), and the engine loads them from there. The pods never hold
// the store's credentials.

// WithModelFetch lets revisions serve registered models: image holds the
// launcher, gateway is the gateway's URL as the cluster's pods reach it,
// box seals the revisions' grants (the installation's secrets key).
func WithModelFetch(image, gateway string, box grant.Box) Option {
	return func(s *Serving) { s.fetchImage, s.fetchGateway, s.fetchBox = image, gateway, box }
}

// ModelDir is where a revision's engine finds a registered model's bytes.
const ModelDir = launch.InputsDir + "/model"

// modelGrantTTL bounds a revision's grant; it also dies with its endpoint.
// A pod that starts later (a restart, a scale-up) fetches with the same
// grant, so it lasts as long as a revision may serve.
const modelGrantTTL = 365 * 24 * time.Hour

// revisionSecretName is the Secret of a revision: its model grant and the
// values of the project secrets its engine gets.
func revisionSecretName(revision string) string { return revision + "-secrets" }

// SecretResolver opens a project's secrets by name (the vault).
type SecretResolver interface {
	Resolve(ctx context.Context, project string, names []string) (map[string]string, error)
}

// WithSecrets lets endpoints' engines get project secrets (spec.secrets)
// as environment variables, from a Secret of each revision's.
func WithSecrets(r SecretResolver) Option { return func(s *Serving) { s.secrets = r } }

// modelFetch is what buildDeployment needs to fetch a registered model.
type modelFetch struct {
	image, secret string
	spec          launch.Spec
}

// annotationGrantExpires on a revision's Secret is when its grant expires
// (RFC 3339): a grant is sealed again only near then, not on every apply.
const annotationGrantExpires = "atelier.dev/grant-expires"

// grantRenewBefore is how long before its expiry a grant is sealed again.
const grantRenewBefore = 30 * 24 * time.Hour

// revisionSecret builds the revision's Secret, or nil when it needs none:
// the grant of a registered model's fetch (with what buildDeployment needs
// for it) and the values of the project secrets spec names. The Secret
// already there (an earlier apply) lends what cannot be had now: its
// grant, until it nears expiry, and, when the vault cannot answer or a
// secret was deleted, the values the revision's pods already run with, so
// that a layout change (a scale, a rollout of another revision) never
// stops a serving revision. A worker that cannot fetch, or has no secrets
// key, says what it lacks (for good: the revision cannot start); a
// missing secret of a new revision is named.
func (s *Serving) revisionSecret(ctx context.Context, ns, project, endpoint string, revision int, spec inference.EndpointSpec) (*modelFetch, *corev1.Secret, error) {
	reg := spec.Model.Registered
	if reg == nil && len(spec.Secrets) == 0 {
		return nil, nil, nil
	}
	name := RevisionName(project, endpoint, revision)
	labels := RevisionLabels(project, endpoint, revision)
	cur, err := s.clients.Kube.CoreV1().Secrets(ns).Get(ctx, revisionSecretName(name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cur = nil
	case err != nil:
		return nil, nil, framework.WrapAPI(err, "get Secret %s/%s", ns, revisionSecretName(name))
	case !hasLabels(cur.Labels, labels):
		return nil, nil, framework.Invalid("Secret %s/%s exists and is not revision %d of endpoint %s's: Atelier leaves it alone", ns, cur.Name, revision, endpoint)
	}
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: revisionSecretName(name), Namespace: ns, Labels: labels, Annotations: map[string]string{}},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{},
	}
	if len(spec.Secrets) > 0 {
		if err := s.secretValues(ctx, project, endpoint, spec.Secrets, cur, sec); err != nil {
			return nil, nil, err
		}
	}
	if reg == nil {
		return nil, sec, nil
	}
	if missing := framework.LauncherMissing(s.fetchImage, s.fetchGateway, s.fetchBox != nil); len(missing) > 0 {
		return nil, nil, framework.Invalid("revision %d of endpoint %s serves model %s version %d, but this cluster's worker cannot fetch it into a pod: it lacks %v", revision, endpoint, reg.Model, reg.Version, missing)
	}
	now := s.clock.Now()
	if exp, err := time.Parse(time.RFC3339, curAnnotation(cur, annotationGrantExpires)); err == nil && exp.Sub(now) > grantRenewBefore && len(cur.Data[launch.GrantKey]) > 0 {
		sec.Data[launch.GrantKey] = cur.Data[launch.GrantKey]
		sec.Annotations[annotationGrantExpires] = cur.Annotations[annotationGrantExpires]
	} else {
		expires := now.Add(modelGrantTTL).UTC().Truncate(time.Second)
		token, err := grant.Seal(ctx, s.fetchBox, grant.Grant{Project: project, Endpoint: endpoint, Revision: revision,
			Inputs: []grant.GrantInput{{Digest: reg.Digest, Files: reg.Files}}, Expires: expires})
		if err != nil {
			return nil, nil, fmt.Errorf("seal revision %d's grant: %w", revision, err)
		}
		sec.Data[launch.GrantKey] = []byte(token)
		sec.Annotations[annotationGrantExpires] = expires.Format(time.RFC3339)
	}
	f := &modelFetch{image: s.fetchImage, secret: sec.Name, spec: launch.Spec{
		Gateway: s.fetchGateway, ResultPath: corev1.TerminationMessagePathDefault,
		Inputs: []launch.Input{{Name: "model", Digest: reg.Digest, Size: reg.Size, Files: reg.Files}},
	}}
	return f, sec, nil
}

// secretValues puts the values of refs' project secrets into sec, or,
// when they cannot be had, the ones cur (the revision's Secret already
// there) holds for every one of them.
func (s *Serving) secretValues(ctx context.Context, project, endpoint string, refs []inference.SecretEnv, cur, sec *corev1.Secret) error {
	var names []string
	for _, ref := range refs {
		names = append(names, ref.Name)
	}
	var err error
	if s.secrets == nil {
		err = framework.Invalid("endpoint %s references secrets but this cluster's worker has no secrets key (ATELIER_SECRETS_KEY_URL)", endpoint)
	} else {
		var values map[string]string
		values, err = s.secrets.Resolve(ctx, project, names)
		if err == nil {
			for n, v := range values {
				sec.Data[n] = []byte(v)
			}
			return nil
		}
		if errors.Is(err, catalog.ErrNotFound) {
			err = framework.Invalid("endpoint %s: %v", endpoint, err)
		} else {
			err = fmt.Errorf("resolving endpoint %s's secrets: %w", endpoint, err)
		}
	}
	if cur == nil {
		return err
	}
	for _, n := range names {
		v, ok := cur.Data[n]
		if !ok {
			return err
		}
		sec.Data[n] = v
	}
	s.logger.Warn("keeping the values a revision's pods run with: its secrets cannot be opened now",
		zap.String("endpoint", endpoint), zap.String("secret", sec.Name), zap.Error(err))
	return nil
}

func curAnnotation(s *corev1.Secret, key string) string {
	if s == nil {
		return ""
	}
	return s.Annotations[key]
}

// hasLabels reports whether got carries every label of want.
func hasLabels(got, want map[string]string) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// withSecretEnv gives the engine its secrets, from the revision's Secret.
func withSecretEnv(t *corev1.PodTemplateSpec, refs []inference.SecretEnv, secret string) {
	for i := range t.Spec.Containers {
		c := &t.Spec.Containers[i]
		if c.Name != ContainerName {
			continue
		}
		for _, ref := range refs {
			c.Env = append(c.Env, corev1.EnvVar{Name: ref.Env, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: secret}, Key: ref.Name}}})
		}
	}
}

// redactor hides the values of the revision's secrets in what is read
// back from its pods (an engine's last log lines); nil when it has none.
// An error when the Secret cannot be read: the caller then shows nothing
// rather than risk a value.
func (s *Serving) redactor(ctx context.Context, ns, revision string) (*redact.Redactor, error) {
	sec, err := s.clients.Kube.CoreV1().Secrets(ns).Get(ctx, revisionSecretName(revision), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	values := map[string]string{}
	for k, v := range sec.Data {
		values[k] = string(v)
	}
	return redact.New(values), nil
}

// ensureRevisionSecret creates the revision's Secret, or brings the one
// there up to date when it differs (a pod that starts later gets the
// secrets' current values; running ones keep what they read at their
// start).
func (s *Serving) ensureRevisionSecret(ctx context.Context, sec *corev1.Secret, project string) error {
	if err := s.ensureNamespace(ctx, sec.Namespace, project); err != nil {
		return err
	}
	cs := s.clients.Kube.CoreV1().Secrets(sec.Namespace)
	_, err := cs.Create(ctx, sec, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		cur, gerr := cs.Get(ctx, sec.Name, metav1.GetOptions{})
		if gerr != nil {
			return framework.WrapAPI(gerr, "get Secret %s/%s", sec.Namespace, sec.Name)
		}
		if maps.EqualFunc(cur.Data, sec.Data, bytes.Equal) && maps.Equal(cur.Annotations, sec.Annotations) {
			return nil
		}
		cur.Data, cur.Annotations = sec.Data, sec.Annotations
		_, err = cs.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return framework.WrapAPI(err, "create Secret %s/%s", sec.Namespace, sec.Name)
	}
	return nil
}

// deleteRevisionSecret deletes the revision's Secret if it is the
// revision's (its owner reference deletes it with the Deployment too; this
// covers a Secret whose Deployment was never made).
func (s *Serving) deleteRevisionSecret(ctx context.Context, ns, revision string, labels map[string]string) (bool, error) {
	cs := s.clients.Kube.CoreV1().Secrets(ns)
	cur, err := cs.Get(ctx, revisionSecretName(revision), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, framework.WrapAPI(err, "get Secret %s/%s", ns, revisionSecretName(revision))
	}
	if !hasLabels(cur.Labels, labels) {
		return false, nil
	}
	if err := cs.Delete(ctx, cur.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return false, framework.WrapAPI(err, "delete Secret %s/%s", ns, cur.Name)
	}
	return true, nil
}

// ownRevisionSecret makes the revision's Deployment the owner of its Secret,
// so that deleting the revision deletes it.
func (s *Serving) ownRevisionSecret(ctx context.Context, sec *corev1.Secret, d *appsv1.Deployment) error {
	cs := s.clients.Kube.CoreV1().Secrets(sec.Namespace)
	cur, err := cs.Get(ctx, sec.Name, metav1.GetOptions{})
	if err != nil {
		return framework.WrapAPI(err, "get Secret %s/%s", sec.Namespace, sec.Name)
	}
	for _, o := range cur.OwnerReferences {
		if o.UID == d.UID {
			return nil
		}
	}
	cur.OwnerReferences = append(cur.OwnerReferences, metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment", Name: d.Name, UID: d.UID})
	if _, err := cs.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return framework.WrapAPI(err, "own Secret %s/%s", sec.Namespace, sec.Name)
	}
	return nil
}

// withModel adds the fetch to a revision's pod template: the init
// container and the volume the engine reads the model from.
func withModel(t *corev1.PodTemplateSpec, f *modelFetch) error {
	b, err := json.Marshal(f.spec)
	if err != nil {
		return err
	}
	mount := corev1.VolumeMount{Name: launch.Volume, MountPath: launch.Dir}
	t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: launch.Volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	t.Spec.InitContainers = append(t.Spec.InitContainers, corev1.Container{
		Name:    framework.LauncherInit,
		Image:   f.image,
		Command: []string{framework.LauncherInImage, "fetch"},
		Env: []corev1.EnvVar{
			{Name: launch.SpecEnv, Value: string(b)},
			{Name: launch.GrantEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: f.secret}, Key: launch.GrantKey}}},
		},
		VolumeMounts: []corev1.VolumeMount{mount},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("256Mi")},
		},
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		ImagePullPolicy:          corev1.PullIfNotPresent,
	})
	for i := range t.Spec.Containers {
		if t.Spec.Containers[i].Name == ContainerName {
			ro := mount
			ro.ReadOnly = true
			t.Spec.Containers[i].VolumeMounts = append(t.Spec.Containers[i].VolumeMounts, ro)
		}
	}
	return nil
}
