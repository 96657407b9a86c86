package entry

import (
	"os"
	"time"
)

// The records are JSON, written by hand (see the package doc); package
// supervisor reads them with encoding/json into types with these names.

// jsonString appends s as a JSON string.
func jsonString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := range len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c) // UTF-8 passes through
		}
	}
	return append(b, '"')
}

// object writes a JSON object from key/value pairs whose values are
// already JSON.
func object(kv ...string) []byte {
	b := []byte{'{'}
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonString(b, kv[i])
		b = append(b, ':')
		b = append(b, kv[i+1]...)
	}
	return append(b, '}', '\n')
}

func str(s string) string      { return string(jsonString(nil, s)) }
func num(n int64) string       { return itoa(n) }
func stamp(t time.Time) string { return str(t.Format(time.RFC3339Nano)) }
func boolean(v bool) string {
	if v {
		return "true"
	}
	return "false"
}

// writeRecord writes b to dir/name atomically (a temporary file renamed),
// without syncing: after a crash of the machine nothing can be adopted.
func writeRecord(dir, name string, b []byte) error {
	tmp := dir + "/." + name + "." + itoa(int64(os.Getpid()))
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir+"/"+name); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}
