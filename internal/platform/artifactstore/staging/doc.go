// Package staging is where the artifacts of steps whose pods cannot take
// them as files (ray steps: a Ray job's tasks run on every node of its
// cluster, and Ray Train writes checkpoints to a storage_path URI) meet
// those pods: a bucket, or a prefix of one, that the pods reach with their
// own cloud identity (the cluster's service account, IRSA, workload
// identity), apart from the content-addressed artifact store, whose
// credentials no step ever holds.
//
// Each attempt has its own prefix,
// "<project>/<run>/<step>[/<item>]/<attempt>", with inputs/ and outputs/
// under it. Before the job is created, the cluster worker copies each
// input from the artifact store to inputs/<name> (a file as one object,
// a directory's files under inputs/<name>/), and hands the job the URIs
// of inputs/ and outputs/ as the pods see them ($ATELIER_INPUTS_URI,
// $ATELIER_ARTIFACTS_URI). Once the job succeeded it stores each declared
// output found at outputs/<path> (an object at exactly that key is a
// file, objects under <path>/ a directory) into the artifact store, by
// content, through the same hashing code as every other output
// (artifactstore/tree), so lineage and digests are a container's. Then
// the attempt's prefix is removed, after a failure too; what a crash
// leaves is swept once it is older than any job may run (Sweep).
//
// The bytes move through the worker (streamed, bounded memory): a copy
// in, a read to hash and a read to store out.
package staging
