// Package rayjob runs ray steps as KubeRay RayJobs.
//
// A RayJob either brings its own RayCluster (built from the step's cluster
// template, deleted when the job finishes unless shutdownAfterJobFinishes is
// false) or, when the step names one of the run's shared clusters, selects
// it with clusterSelector {ray.io/cluster: <name>}. Submission uses KubeRay's
// K8sJobMode: a submitter Job named like the RayJob runs `ray job submit`,
// and its pod's termination message is where outputs are read from.
package rayjob
