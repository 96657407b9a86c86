// Package admission holds the activities of GPU admission: submitting a
// step's GPU gang to its cluster's admission workflow (signal-with-start,
// so the first GPU step of a cluster starts it), and loading what a
// decision reads from the catalogue (the cluster's GPU inventory, reported
// by its worker, and every project's GPU policy). The decisions themselves
// are package gpu's; the workflow that owns each cluster's queue is
// admission.Workflow.
package admission
