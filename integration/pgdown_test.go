package integration

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/workflows"
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
	id := s.startRun(map[string]any{"pipeline": "slow"})
	s.waitListed(id, workflows.RunRunning, 10*time.Second)

	proxy.down()
	for _, path := range []string{s.path("/runs"), s.path("/runs/%s", id), "/v1/projects"} {
		req, _ := http.NewRequest("GET", s.url+path, nil)
		req.Header.Set("Authorization", "Bearer "+s.token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 503, resp.StatusCode, path)
		assert.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), path)
		assert.NotEmpty(t, resp.Header.Get("Retry-After"), path)
	}
	resp, err := http.Get(s.url + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 503, resp.StatusCode)
	time.Sleep(4 * time.Second) // the run's step ends while Postgres is away

	proxy.up()
	require.Eventually(t, func() bool { return s.do("GET", s.path("/runs"), nil, nil) == 200 }, 30*time.Second, 200*time.Millisecond,
		"the gateway did not recover by itself")
	s.waitListed(id, workflows.RunSucceeded, 60*time.Second)
}
