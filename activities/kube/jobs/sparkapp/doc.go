// Package sparkapp runs spark steps as SparkApplications (spark-operator
// v1beta2), in cluster mode, never restarted by the operator (retries
// belong to the pipeline).
//
// Environment variables are set with the driver's and executors' envVars,
// which the operator turns into spark-submit configuration and which
// therefore work without its mutating webhook. GPUs (spec.driver.gpu,
// spec.executor.gpu) and per-role node selectors, on the other hand, are
// applied by the webhook: a cluster running GPU Spark steps needs it
// enabled (the Helm chart's default).
package sparkapp
