// Package mirror holds the activity through which workflows write their
// status to the Postgres catalogue (the runs index the REST API lists). Workflows cannot do I/O themselves; keeping these
// activities thin (validate, call the store) keeps retries cheap and safe.
package mirror
