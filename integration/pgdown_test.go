package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
)

// tcpProxy forwards a port to Postgres and can cut it, which to the
// gateway and worker is Postgres going down: new connections are refused
// and open ones reset, until it comes back on the same address.
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, target: target}
	p.up()
	t.Cleanup(p.down)
	return p
}

func (p *tcpProxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	addr := p.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	require.NoError(p.t, err)
	p.ln, p.addr = ln, ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(s, c); s.Close() }()
			go func() { _, _ = io.Copy(c, s); c.Close() }()
		}
	}()
}

func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Seen by a user: with Postgres stopped every route answered 500 "internal
// error". It must be 503 problem+json with Retry-After; the gateway recovers
// by itself when Postgres returns, and a run in flight meanwhile converges.
func TestPostgresOutageIs503AndRecovers(t *testing.T) {
	var proxy *tcpProxy
	s := newStack(t, stackOptions{dbURL: func(direct string) string {
		u, err := url.Parse(direct)
		require.NoError(t, err)
		proxy = newTCPProxy(t, u.Host)
		u.Host = proxy.addr
		return u.String()
	}})
	s.createPipeline("slow", "steps:\n  - name: wait\n    container: {command: [sleep, '3']}\n")
	id := s.start("slow", nil)
	s.waitListed(id, gen.RunStateRUNNING, 10*time.Second)

	proxy.down()
	ctx, c := context.Background(), s.client()
	list, err := c.ListRunsWithResponse(ctx, s.project, nil)
	require.NoError(t, err)
	get, err := c.GetRunWithResponse(ctx, s.project, id)
	require.NoError(t, err)
	projects, err := c.ListProjectsWithResponse(ctx)
	require.NoError(t, err)
	// The spec lists no 503 for these reads (the client has no typed
	// field for it): the answer is checked on the HTTP response.
	for what, res := range map[string]*http.Response{
		"list runs": list.HTTPResponse, "get run": get.HTTPResponse, "list projects": projects.HTTPResponse,
	} {
		assert.Equal(t, 503, res.StatusCode, what)
		assert.Equal(t, "application/problem+json", res.Header.Get("Content-Type"), what)
		assert.NotEmpty(t, res.Header.Get("Retry-After"), what)
	}
	ready, err := c.GetReadyzWithResponse(ctx)
	require.NoError(t, err)
	assert.Equal(t, 503, ready.StatusCode())
	time.Sleep(4 * time.Second) // the run's step ends while Postgres is away

	proxy.up()
	require.Eventually(t, func() bool {
		res, err := c.ListRunsWithResponse(ctx, s.project, nil)
		return err == nil && res.StatusCode() == 200
	}, 30*time.Second, 200*time.Millisecond,
		"the gateway did not recover by itself")
	s.waitListed(id, gen.RunStateSUCCEEDED, 60*time.Second)
}
