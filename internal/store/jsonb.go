package store

import "bytes"

// jsonbSafe returns JSON that Postgres' jsonb accepts: jsonb rejects the
// escape \u0000 (a NUL in a string), which a step's stderr or a Go
// pipeline's error can contain, and a rejected mirror write leaves a run
// RUNNING in the catalogue for good. Each escaped NUL becomes U+FFFD, the
// replacement character; an escaped backslash followed by "u0000" is text,
// not a NUL, and is kept.
func jsonbSafe(b []byte) []byte {
	const nul = `\u0000`
	if !bytes.Contains(b, []byte(nul)) {
		return b
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); {
		if b[i] == '\\' && i+1 < len(b) {
			if bytes.HasPrefix(b[i:], []byte(nul)) {
				out = append(out, `\ufffd`...)
				i += len(nul)
				continue
			}
			out = append(out, b[i], b[i+1]) // any other escape, \\ included
			i += 2
			continue
		}
		out = append(out, b[i])
		i++
	}
	return out
}
