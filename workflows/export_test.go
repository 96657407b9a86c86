package workflows

// SetBatchItemsPerRun makes batch workflows continue as new after n items
// per run (0: only at the history budget) until the returned func restores
// it.
func SetBatchItemsPerRun(n int) (restore func()) {
	old := batchItemsPerRun
	batchItemsPerRun = n
	return func() { batchItemsPerRun = old }
}
