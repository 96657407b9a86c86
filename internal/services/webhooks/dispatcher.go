package webhooks

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/services/outbox"
)

// Store is the part of the catalogue the dispatcher needs.
type Store interface {
	ClaimWebhookDeliveries(ctx context.Context, owner string, now, leaseUntil time.Time, max int) ([]catalog.ClaimedDelivery, error)
	RecordWebhookAttempt(ctx context.Context, r catalog.AttemptResult) error
	DeleteFinishedWebhookDeliveries(ctx context.Context, before time.Time, max int) (int64, error)
}

// Options tune the dispatcher; zero values take the defaults.
type Options struct {
	// Poll is how often the outbox is read for due deliveries (default
	// 500 ms): the delay of a delivery after its event is stored.
	Poll time.Duration
	// Batch is the most deliveries claimed at once (default 32); they are
	// sent Concurrency at a time (default 8).
	Batch, Concurrency int
	// Timeout bounds one attempt: connect, send, response headers and the
	// first KiB of body (default 10 s).
	Timeout time.Duration
	// Backoff is the wait before the second attempt; it doubles with
	// every attempt up to MaxBackoff (defaults 10 s and 1 h).
	Backoff, MaxBackoff time.Duration
	// MaxAttempts is when a delivery gives up (default 10: about 1.5 h
	// with the default backoff).
	MaxAttempts int
	// AllowPrivate lets deliveries reach loopback, private and link-local
	// addresses (see the package documentation).
	AllowPrivate bool
	// KeepFor is how long the log keeps finished deliveries (default 30
	// days).
	KeepFor time.Duration
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Poll, 500*time.Millisecond)
	def(&o.Timeout, 10*time.Second)
	def(&o.Backoff, 10*time.Second)
	def(&o.MaxBackoff, time.Hour)
	def(&o.KeepFor, 30*24*time.Hour)
	if o.Batch <= 0 {
		o.Batch = 32
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 10
	}
}

// Dispatcher delivers queued webhook events (see the package doc).
type Dispatcher struct {
	store  Store
	client *http.Client
	now    func() time.Time
	log    *zap.Logger
	opt    Options
	owner  string // this dispatcher's lease owner ID
	prune  time.Time
}

// New returns a Dispatcher; now is its clock.
func New(s Store, now func() time.Time, log *zap.Logger, opt Options) *Dispatcher {
	opt.defaults()
	var id [6]byte
	_, _ = rand.Read(id[:])
	tr := &http.Transport{
		Proxy:                 nil, // a proxy would hide the address the SSRF check must see
		DialContext:           dialContext(opt.AllowPrivate, opt.Timeout),
		TLSHandshakeTimeout:   opt.Timeout,
		ResponseHeaderTimeout: opt.Timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &Dispatcher{
		store: s, now: now, log: log, opt: opt,
		owner: "gw-" + hex.EncodeToString(id[:]),
		client: &http.Client{
			Transport: tr,
			Timeout:   opt.Timeout,
			// A redirect could lead anywhere, past the checks: a 3xx is a
			// failed attempt.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Run delivers until ctx is done.
func (d *Dispatcher) Run(ctx context.Context) {
	outbox.Poll(ctx, d.opt.Poll, d.opt.Batch, d.Tick, func(err error) {
		d.log.Warn("webhooks: cannot read the outbox; retrying", zap.Error(err))
	})
}

// Tick claims the deliveries due now, sends them and records the attempts;
// it returns how many it claimed. Once an hour it prunes the log.
func (d *Dispatcher) Tick(ctx context.Context) (int, error) {
	now := d.now()
	if now.Sub(d.prune) > time.Hour {
		d.prune = now
		if n, err := d.store.DeleteFinishedWebhookDeliveries(ctx, now.Add(-d.opt.KeepFor), 1000); err != nil {
			d.log.Warn("webhooks: pruning the delivery log failed", zap.Error(err))
		} else if n > 0 {
			d.log.Info("webhooks: pruned finished deliveries", zap.Int64("deliveries", n))
		}
	}
	// The lease outlasts the attempt (timeout) with a margin for
	// recording it; past it another gateway may try again.
	claimed, err := d.store.ClaimWebhookDeliveries(ctx, d.owner, now, now.Add(d.opt.Timeout+30*time.Second), d.opt.Batch)
	if err != nil {
		return 0, err
	}
	sem := make(chan struct{}, d.opt.Concurrency)
	var wg sync.WaitGroup
	for _, c := range claimed {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			d.deliver(ctx, c)
		})
	}
	wg.Wait()
	return len(claimed), nil
}

// deliver makes one attempt of c and records it.
func (d *Dispatcher) deliver(ctx context.Context, c catalog.ClaimedDelivery) {
	started := d.now()
	code, errMsg := d.send(ctx, c, started)
	res := catalog.AttemptResult{
		DeliveryID: c.ID, Owner: d.owner, Attempt: c.Attempt,
		StartedAt: started, Duration: d.now().Sub(started), StatusCode: code, Error: errMsg,
	}
	switch {
	case errMsg == "":
		res.State = catalog.DeliverySucceeded
	case c.Attempt >= d.opt.MaxAttempts:
		res.State = catalog.DeliveryFailed
		res.Error = fmt.Sprintf("%s (gave up after %d attempts)", errMsg, c.Attempt)
	default:
		res.State = catalog.DeliveryPending
		res.NextAttemptAt = d.now().Add(Backoff(d.opt.Backoff, d.opt.MaxBackoff, c.Attempt))
	}
	if res.NextAttemptAt.IsZero() {
		res.NextAttemptAt = res.StartedAt
	}
	// Recorded even when ctx is done (a gateway stopping): the attempt
	// was made.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := d.store.RecordWebhookAttempt(rctx, res); err != nil {
		d.log.Warn("webhooks: cannot record an attempt; the delivery is retried when its lease expires",
			zap.String("delivery", c.ID), zap.Int("attempt", c.Attempt), zap.Error(err))
	}
	if errMsg != "" {
		d.log.Info("webhooks: delivery attempt failed", zap.String("delivery", c.ID), zap.String("event", c.Event),
			zap.Int("attempt", c.Attempt), zap.String("error", errMsg))
	}
}

// send POSTs c's payload; it returns the response's status code (nil when
// none came) and what went wrong ("" for a 2xx).
func (d *Dispatcher) send(ctx context.Context, c catalog.ClaimedDelivery, at time.Time) (*int, string) {
	ts := at.Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(c.Payload))
	if err != nil {
		return nil, "bad URL: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Atelier-Webhooks/1")
	req.Header.Set(HeaderEvent, c.Event)
	req.Header.Set(HeaderEventID, c.EventID)
	req.Header.Set(HeaderDelivery, c.ID)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(c.Secret, ts, c.Payload))
	resp, err := d.client.Do(req)
	if err != nil {
		var re *refusedError
		if errors.As(err, &re) {
			return nil, re.Error()
		}
		return nil, trim(err.Error(), 300)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
	code := resp.StatusCode
	if code >= 200 && code < 300 {
		return &code, ""
	}
	msg := "HTTP " + resp.Status
	if code >= 300 && code < 400 {
		msg += " (redirects are not followed)"
	}
	if b := strings.TrimSpace(string(body)); b != "" {
		msg += ": " + trim(b, 200)
	}
	return &code, msg
}

// Backoff is the wait after failed attempt n (1-based): base·2^(n-1),
// capped at max.
func Backoff(base, max time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
