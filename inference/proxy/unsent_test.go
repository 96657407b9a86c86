package proxy

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
)

// A replica that goes away while the proxy writes the request (EPIPE), or
// before it answers, leaves the request unanswered: it is sent to another
// replica. An answer cut short is not retried.
func TestUnsentErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "write", Err: os.NewSyscallError("write", syscall.EPIPE)}, true},
		{&net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{&net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{errors.New("http: server closed idle connection"), true},
		{errors.New("context deadline exceeded"), false},
	} {
		if got := unsent(c.err); got != c.want {
			t.Errorf("unsent(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
