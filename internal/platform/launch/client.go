package launch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
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
}

var _ tree.Objects = (*Client)(nil)

// NewClient is a client of the gateway at base (its URL as the pod
// reaches it) holding the sealed grant.
func NewClient(base, grant string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport}
	}
	return &Client{gateway: strings.TrimRight(base, "/"), grant: grant, http: hc}
}

// signTimeout bounds one signing request (not the transfers).
const signTimeout = time.Minute

// Sign asks the gateway for targets.
func (c *Client) Sign(ctx context.Context, req SignRequest) (SignResponse, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return SignResponse{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, signTimeout)
	defer cancel()
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.gateway+SignPath, bytes.NewReader(body))
	if err != nil {
		return SignResponse{}, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+c.grant)
	resp, err := c.http.Do(hr)
	if err != nil {
		return SignResponse{}, fmt.Errorf("ask the gateway at %s for URLs: %w", c.gateway, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return SignResponse{}, fmt.Errorf("the gateway at %s refused to sign: %s", c.gateway, problemText(resp))
	}
	var out SignResponse
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&out); err != nil {
		return SignResponse{}, fmt.Errorf("the gateway's answer: %w", err)
	}
	if len(out.Get) != len(req.Get) || len(out.Put) != len(req.Put) {
		return SignResponse{}, fmt.Errorf("the gateway answered %d+%d targets for %d+%d objects", len(out.Get), len(out.Put), len(req.Get), len(req.Put))
	}
	return out, nil
}

// Put implements tree.Objects.
func (c *Client) Put(ctx context.Context, digest string, size int64, r io.Reader, contentType string) error {
	res, err := c.Sign(ctx, SignRequest{Put: []PutRequest{{Digest: digest, Size: size, ContentType: contentType}}})
	if err != nil {
		return err
	}
	t := res.Put[0]
	if t.Stored {
		return nil
	}
	// The body is the file (or manifest) as is: its length is known, so
	// the request streams with a Content-Length and nothing is buffered.
	body := io.NopCloser(r)
	if size == 0 {
		body = http.NoBody
	}
	hr, err := c.request(ctx, t, body)
	if err != nil {
		return err
	}
	hr.ContentLength = size
	resp, err := c.http.Do(hr)
	if err != nil {
		return fmt.Errorf("upload %s: %w", digest, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("upload %s: %s", digest, problemText(resp))
	}
	return nil
}

// Open implements tree.Objects.
func (c *Client) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	res, err := c.Sign(ctx, SignRequest{Get: []string{digest}})
	if err != nil {
		return nil, err
	}
	hr, err := c.request(ctx, res.Get[0], nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", digest, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %w", digest, tree.ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		defer resp.Body.Close()
		return nil, fmt.Errorf("download %s: %s", digest, problemText(resp))
	}
	return resp.Body, nil
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
