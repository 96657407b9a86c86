// Package lineage holds the local activity that resolves a step's
// catalogue inputs (an artifact of an earlier run by ID, a registered
// model's version by alias or number) to artifact references before the
// step runs. It reads the catalogue scoped by the run's project, so a
// step can never read another project's artifact.
package lineage
