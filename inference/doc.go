// Package inference will hold inference serving: long-lived InferenceServer
// endpoints (backends Triton and vLLM) owned by an entity workflow, with
// revisions, rolling / canary / blue-green rollouts and autoscaling, deployed
// by pipeline steps of kind "inference".
//
// Not implemented yet: the spec parser accepts kind "inference" only to tell
// the user that the local runtime cannot run it. See the README's "Not yet"
// list.
package inference
