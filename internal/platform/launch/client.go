package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
)

// Client is the objects a grant reaches, as tree.Objects: each object is
// signed for by the gateway, then moved to or from the URL it gave (the
// store's, or the gateway's own when the store cannot sign).
type Client struct {
	gateway string
	grant   string
	http    *http.Client
	// storing is SignRequest.Storing for Puts (SetStoring).
	storing atomic.Int64
	// batch is how many objects Presign signs per request; 0: none
	// (SetBatch).
	batch atomic.Int64
	now   func() time.Time
	// presigned holds the targets Presign signed, until their first use
	// or until they are too old to trust (presignedTTL).
	mu        sync.Mutex
	presigned map[presignKey]*presignedTarget
}

// presignKey names a presigned target: a digest to read, or to write
// with a content type (S3 signs the type into the URL).
type presignKey struct {
	put         bool
	digest      string
	contentType string
}

type presignedTarget struct {
	t      Target
	signed time.Time
	// uses is how many Puts or Opens Presign was told of (a directory
	// may hold the same bytes twice); the entry goes at the last.
	uses int
}

// Batch is how many objects Presign signs per request by default: half
// the gateway's bound (MaxSign). The gateway signs each and stats the
// store for each Put (16 at a time): 0.3 s at most for 500 on a directory
// store, 1.2 s on a local S3 server, on a loaded 2-core machine
// (bench/launchsign), well within signTimeout.
const Batch = 500

// presignedTTL is how long a presigned target is used: a third of the
// URLs' life (URLExpiry), so that a transfer started late still starts
// well before its URL expires. An older one is signed again.
const presignedTTL = URLExpiry / 3

// SetBatch sets how many objects Presign signs per request (at most
// MaxSign); 0 or less turns presigning off: every Put and Open signs its
// own object, as before batching (a baseline for measurements).
func (c *Client) SetBatch(n int) { c.batch.Store(int64(min(max(n, 0), MaxSign))) }

// PresignWindow implements tree.Presigner.
func (c *Client) PresignWindow() int { return int(c.batch.Load()) }

var _ tree.Presigner = (*Client)(nil)

// Presign signs, Batch objects per request, what gets and puts are about
// to read and write; Open and Put then use those targets on their first
// try while they are young (presignedTTL). Objects already presigned and
// young are not signed again. Puts carry Storing (SetStoring), so outputs
// over the project's artifact cap are refused (ErrOverLimit) before any
// byte moves. Without batching (SetBatch 0) it does nothing.
func (c *Client) Presign(ctx context.Context, gets []string, puts []tree.Upload) error {
	batch := int(c.batch.Load())
	if batch <= 0 {
		return nil
	}
	now := c.now()
	c.mu.Lock()
	for k, e := range c.presigned { // never used: a failed transfer's
		if now.Sub(e.signed) >= presignedTTL {
			delete(c.presigned, k)
		}
	}
	// Count the uses of what is presigned and young; sign the rest once.
	var needGet []string
	var needPut []PutRequest
	pending := map[presignKey]int{}
	for _, d := range gets {
		k := presignKey{digest: d}
		if e, ok := c.presigned[k]; ok {
			e.uses++
			continue
		}
		if pending[k] == 0 {
			needGet = append(needGet, d)
		}
		pending[k]++
	}
	for _, p := range puts {
		k := presignKey{put: true, digest: p.Digest, contentType: p.ContentType}
		if e, ok := c.presigned[k]; ok {
			e.uses++
			continue
		}
		if pending[k] == 0 {
			needPut = append(needPut, PutRequest{Digest: p.Digest, Size: p.Size, ContentType: p.ContentType})
		}
		pending[k]++
	}
	c.mu.Unlock()
	for len(needGet)+len(needPut) > 0 {
		var req SignRequest
		n := min(batch, len(needGet))
		req.Get, needGet = needGet[:n], needGet[n:]
		if m := min(batch-n, len(needPut)); m > 0 {
			req.Put, needPut = needPut[:m], needPut[m:]
			req.Storing = c.storing.Load()
		}
		signed := c.now()
		res, err := c.Sign(ctx, req)
		if err != nil {
			return err
		}
		c.mu.Lock()
		if c.presigned == nil {
			c.presigned = map[presignKey]*presignedTarget{}
		}
		for i, d := range req.Get {
			k := presignKey{digest: d}
			c.presigned[k] = &presignedTarget{t: res.Get[i], signed: signed, uses: pending[k]}
		}
		for i, p := range req.Put {
			k := presignKey{put: true, digest: p.Digest, contentType: p.ContentType}
			c.presigned[k] = &presignedTarget{t: res.Put[i], signed: signed, uses: pending[k]}
		}
		c.mu.Unlock()
	}
	return nil
}

// takePresigned is the presigned target of k if it is young enough,
// counting the use.
func (c *Client) takePresigned(k presignKey) (Target, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.presigned[k]
	if !ok {
		return Target{}, false
	}
	if e.uses--; e.uses <= 0 {
		delete(c.presigned, k)
	}
	if c.now().Sub(e.signed) >= presignedTTL {
		delete(c.presigned, k)
		return Target{}, false
	}
	return e.t, true
}

// SetStoring tells the gateway, with every later Put, how many bytes the
// attempt's outputs hold in all (SignRequest.Storing).
func (c *Client) SetStoring(n int64) { c.storing.Store(n) }

var _ tree.Objects = (*Client)(nil)

// NewClient is a client of the gateway at base (its URL as the pod
// reaches it) holding the sealed grant. Without hc, requests time out
// waiting for an answer's headers (not the bytes: a transfer of any size
// runs to its end).
func NewClient(base, grant string, hc *http.Client) *Client {
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = 2 * time.Minute
		hc = &http.Client{Transport: t}
	}
	c := &Client{gateway: strings.TrimRight(base, "/"), grant: grant, http: hc, now: time.Now}
	c.batch.Store(Batch)
	return c
}

// tries is how many times a request is sent before its error is the
// step's; backoff the first wait between tries (doubling).
const (
	tries   = 5
	backoff = 500 * time.Millisecond
)

// retry runs op until it succeeds, fails for good (a 4xx answer but 429,
// or the context ends) or has run tries times, waiting between tries.
func retry(ctx context.Context, op func() error) error {
	wait := backoff
	for i := 1; ; i++ {
		err := op()
		var perm *permanent
		if err == nil || errors.As(err, &perm) || ctx.Err() != nil || i == tries {
			if perm != nil {
				return perm.err
			}
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// permanent marks an error retrying cannot help.
type permanent struct{ err error }

func (p *permanent) Error() string { return p.err.Error() }

// statusErr is the error of an answer with a failure status: permanent
// for a 4xx but 429 (the request itself is refused).
func statusErr(what string, resp *http.Response) error {
	if resp.StatusCode == http.StatusInsufficientStorage {
		return &permanent{fmt.Errorf("%w: %s: %s", ErrOverLimit, what, problemText(resp))}
	}
	err := fmt.Errorf("%s: %s", what, problemText(resp))
	if resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests {
		return &permanent{err}
	}
	return err
}

// doErr is a transport error without its URL's query: a signed URL's
// signature stays out of messages, which reach the run's status.
func doErr(what string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		u := ue.URL
		if i := strings.IndexByte(u, '?'); i >= 0 {
			u = u[:i]
		}
		return fmt.Errorf("%s: %s %s: %v", what, ue.Op, u, ue.Err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// signTimeout bounds one signing request (not the transfers).
const signTimeout = time.Minute

// Sign asks the gateway for targets, retrying what may pass.
func (c *Client) Sign(ctx context.Context, req SignRequest) (SignResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return SignResponse{}, err
	}
	var out SignResponse
	err = retry(ctx, func() error {
		ctx, cancel := context.WithTimeout(ctx, signTimeout)
		defer cancel()
		hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway+SignPath, bytes.NewReader(body))
		if err != nil {
			return &permanent{err}
		}
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("Authorization", "Bearer "+c.grant)
		resp, err := c.http.Do(hr)
		if err != nil {
			return doErr("ask the gateway at "+c.gateway+" for URLs", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return statusErr("the gateway at "+c.gateway+" refused to sign", resp)
		}
		out = SignResponse{}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&out); err != nil {
			return fmt.Errorf("the gateway's answer: %w", err)
		}
		return nil
	})
	if err != nil {
		return SignResponse{}, err
	}
	if len(out.Get) != len(req.Get) || len(out.Put) != len(req.Put) {
		return SignResponse{}, fmt.Errorf("the gateway answered %d+%d targets for %d+%d objects", len(out.Get), len(out.Put), len(req.Get), len(req.Put))
	}
	return out, nil
}

// Put implements tree.Objects. A failed upload is sent again (from the
// start: r seeks) with a URL signed again.
func (c *Client) Put(ctx context.Context, digest string, size int64, r io.Reader, contentType string) error {
	seeker, _ := r.(io.Seeker)
	first := true
	return retry(ctx, func() error {
		if !first {
			if seeker == nil {
				return &permanent{fmt.Errorf("upload %s failed and its bytes cannot be read again", digest)}
			}
			if _, err := seeker.Seek(0, io.SeekStart); err != nil {
				return &permanent{err}
			}
		}
		t, ok := Target{}, false
		if first { // a retry signs again: the presigned URL may be what failed
			t, ok = c.takePresigned(presignKey{put: true, digest: digest, contentType: contentType})
		}
		presigned := ok
		first = false
		if !ok {
			res, err := c.Sign(ctx, SignRequest{Put: []PutRequest{{Digest: digest, Size: size, ContentType: contentType}}, Storing: c.storing.Load()})
			if err != nil {
				return &permanent{err} // Sign retried already
			}
			t = res.Put[0]
		}
		if t.Stored {
			return nil
		}
		// The body is the file (or manifest) as is: its length is known,
		// so the request streams with a Content-Length and nothing is
		// buffered.
		body := io.NopCloser(r)
		if size == 0 {
			body = http.NoBody
		}
		hr, err := c.request(ctx, t, body)
		if err != nil {
			return &permanent{err}
		}
		hr.ContentLength = size
		resp, err := c.http.Do(hr)
		if err != nil {
			return doErr("upload "+digest, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusForbidden && presigned {
			// A URL signed ahead may have expired (or met a skewed
			// clock): sign this one again rather than fail the step.
			return fmt.Errorf("upload %s: the URL signed ahead was refused: %s", digest, problemText(resp))
		}
		if resp.StatusCode/100 != 2 {
			return statusErr("upload "+digest, resp)
		}
		return nil
	})
}

// Open implements tree.Objects. Opening is retried; a transfer cut short
// after it began fails the download (tree.Get's caller retries the step).
func (c *Client) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	var body io.ReadCloser
	first := true
	err := retry(ctx, func() error {
		t, ok := Target{}, false
		if first { // a retry signs again
			t, ok = c.takePresigned(presignKey{digest: digest})
		}
		first = false
		if !ok {
			res, err := c.Sign(ctx, SignRequest{Get: []string{digest}})
			if err != nil {
				return &permanent{err}
			}
			t = res.Get[0]
		}
		hr, err := c.request(ctx, t, nil)
		if err != nil {
			return &permanent{err}
		}
		resp, err := c.http.Do(hr)
		if err != nil {
			return doErr("download "+digest, err)
		}
		switch {
		case resp.StatusCode == http.StatusNotFound:
			resp.Body.Close()
			return &permanent{fmt.Errorf("%s: %w", digest, tree.ErrNotFound)}
		case resp.StatusCode != http.StatusOK:
			defer resp.Body.Close()
			return statusErr("download "+digest, resp)
		}
		body = resp.Body
		return nil
	})
	return body, err
}

func (c *Client) request(ctx context.Context, t Target, body io.ReadCloser) (*http.Request, error) {
	if t.URL == "" || t.Method == "" {
		return nil, fmt.Errorf("the gateway gave no URL")
	}
	u := t.URL
	if strings.HasPrefix(u, "/") { // the gateway's own
		u = c.gateway + u
	}
	var r io.Reader
	if body != nil {
		r = body
	}
	hr, err := http.NewRequestWithContext(ctx, t.Method, u, r)
	if err != nil {
		return nil, err
	}
	for k, v := range t.Header {
		hr.Header.Set(k, v)
	}
	if t.Grant {
		hr.Header.Set("Authorization", "Bearer "+c.grant)
	}
	return hr, nil
}

// problemText is an error answer's status and the start of its body (a
// problem+json's detail, an S3 error's XML).
func problemText(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
	var p struct {
		Detail string `json:"detail"`
	}
	if json.Unmarshal(b, &p) == nil && p.Detail != "" {
		return resp.Status + ": " + p.Detail
	}
	if s := strings.TrimSpace(string(b)); s != "" {
		return resp.Status + ": " + s
	}
	return resp.Status
}
