package runstate

// MemoReuse is the memo field of a retried Go pipeline run that holds its
// Reuse: the steps of the retried run, by name, whose outputs the new run
// takes instead of running them.
const MemoReuse = "atelierReuse"
