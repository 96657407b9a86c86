package framework

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/atelier-ml/atelier/internal/platform/launch"
)

// Launch is how a container step with artifacts or declared metrics runs:
// under the launcher (package launch), which Wrap puts in its pod.
type Launch struct {
	// Image holds the launcher binary at /atelier-launcher (the Atelier
	// image, or any image built with it).
	Image string
	// Spec is handed to the launcher in its environment.
	Spec launch.Spec
}

// LauncherMissing names what a cluster worker lacks to hand artifacts to
// pods through the launcher, as the operator sets it; none when it has
// all: the launcher's image, the gateway's URL as pods reach it, and the
// key that seals grants.
func LauncherMissing(image, gateway string, hasKey bool) []string {
	var missing []string
	if image == "" {
		missing = append(missing, "a launcher image (ATELIER_LAUNCHER_IMAGE)")
	}
	if gateway == "" {
		missing = append(missing, "the gateway's URL as pods reach it (ATELIER_LAUNCHER_GATEWAY_URL)")
	}
	if !hasKey {
		missing = append(missing, "the secrets key (ATELIER_SECRETS_KEY_URL)")
	}
	return missing
}

// LauncherInit is the init container's name.
const LauncherInit = "atelier-launcher"

// LauncherInImage is where the launcher's image holds the binary.
const LauncherInImage = "/atelier-launcher"

// Wrap makes the container named container of spec run under the
// launcher: an init container copies the binary from the launcher's image
// into a shared emptyDir, and the step's command becomes `atelier-launcher
// run -- <command> <args>`. The launcher reads its grant from the
// attempt's Secret (secretName, key launch.GrantKey). The step's image
// must say what to run: Wrap needs its command, since the image's own
// entrypoint is not known here.
func Wrap(spec *corev1.PodSpec, container string, l Launch, secretName string) error {
	c := containerNamed(spec, container)
	if c == nil {
		return fmt.Errorf("no container %s to launch", container)
	}
	if len(c.Command) == 0 {
		return Invalid("a container step with artifacts or declared metrics on Kubernetes needs a command (the launcher runs it; the image's entrypoint is not known to Atelier)")
	}
	if secretName == "" {
		return fmt.Errorf("the launcher needs the attempt's Secret for its grant")
	}
	b, err := json.Marshal(l.Spec)
	if err != nil {
		return err
	}
	mount := corev1.VolumeMount{Name: launch.Volume, MountPath: launch.Dir}
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: launch.Volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	spec.InitContainers = append(spec.InitContainers, corev1.Container{
		Name:            LauncherInit,
		Image:           l.Image,
		Command:         []string{LauncherInImage, "install", launch.Dir + "/bin"},
		VolumeMounts:    []corev1.VolumeMount{mount},
		ImagePullPolicy: c.ImagePullPolicy,
		// The step's security context, so that a namespace's Pod Security
		// level admits both alike; small explicit resources, so that a
		// quota asking for them admits it (it copies one 6 MiB file).
		SecurityContext: c.SecurityContext.DeepCopy(),
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		},
	})
	c.Command = append([]string{launch.Binary, "run", "--"}, append(c.Command, c.Args...)...)
	c.Args = nil
	c.VolumeMounts = append(c.VolumeMounts, mount)
	// The launcher's spec and grant; ATELIER_OUTPUTS moves to a file the
	// launcher reads, as the termination message is the launcher's.
	env := c.Env[:0:0]
	for _, e := range c.Env {
		if e.Name != "ATELIER_OUTPUTS" {
			env = append(env, e)
		}
	}
	c.Env = append(env,
		corev1.EnvVar{Name: "ATELIER_OUTPUTS", Value: launch.OutputsFile},
		corev1.EnvVar{Name: launch.SpecEnv, Value: string(b)},
		corev1.EnvVar{Name: launch.GrantEnv, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: secretName}, Key: launch.GrantKey}}},
	)
	return nil
}
