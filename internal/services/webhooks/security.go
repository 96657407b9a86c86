package webhooks

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Headers of a delivery.
const (
	HeaderEvent     = "X-Atelier-Event"
	HeaderEventID   = "X-Atelier-Event-Id"
	HeaderDelivery  = "X-Atelier-Delivery"
	HeaderTimestamp = "X-Atelier-Timestamp"
	HeaderSignature = "X-Atelier-Signature"
)

// Sign is the X-Atelier-Signature of body sent at unix time ts:
// "sha256=" and the hex HMAC-SHA256, keyed with the webhook's secret, of
// "<ts>.<body>". Signing the timestamp too lets a receiver refuse replays
// of an old delivery.
func Sign(secret string, ts int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(strconv.FormatInt(ts, 10)))
	m.Write([]byte{'.'})
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// Verify checks a delivery as a receiver would: the signature must match
// and the timestamp be within tolerance of now (0: not checked).
func Verify(secret, timestamp, signature string, body []byte, now time.Time, tolerance time.Duration) error {
	ts, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("bad %s %q", HeaderTimestamp, timestamp)
	}
	if !hmac.Equal([]byte(Sign(secret, ts, body)), []byte(signature)) {
		return errors.New("signature does not match")
	}
	if d := now.Sub(time.Unix(ts, 0)); tolerance > 0 && (d > tolerance || d < -tolerance) {
		return fmt.Errorf("timestamp is %s away from now", d.Round(time.Second))
	}
	return nil
}

// MaxURLLength bounds a webhook URL.
const MaxURLLength = 2048

// CheckURL says what is wrong with raw as a webhook URL, or "": an
// absolute http or https URL with a host, without credentials or a
// fragment; with allowPrivate false, a literal IP address must not be one
// Refused says no to (names are checked when a delivery connects).
func CheckURL(raw string, allowPrivate bool) string {
	if len(raw) > MaxURLLength {
		return fmt.Sprintf("longer than %d characters", MaxURLLength)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return "not a URL"
	case u.Scheme != "http" && u.Scheme != "https":
		return "must be an http or https URL"
	case u.Hostname() == "":
		return "needs a host"
	case u.User != nil:
		return "must not carry credentials; use the signature to authenticate deliveries, or a token in the path"
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return "must not have a fragment"
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil && !allowPrivate {
		if why := Refused(ip); why != "" {
			return fmt.Sprintf("%s is %s; the gateway does not send webhooks there (see --webhook-allow-private)", ip, why)
		}
	}
	return ""
}

// Refused says why a delivery must not connect to ip (unless private
// destinations are allowed), or "".
func Refused(ip netip.Addr) string {
	ip = ip.Unmap()
	switch {
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsPrivate():
		return "a private address"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "a link-local address (e.g. a cloud metadata service)"
	case ip.IsUnspecified():
		return "the unspecified address"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "a multicast address"
	case cgnat.Contains(ip):
		return "a shared (CGNAT) address"
	}
	return ""
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// refuseControl is a net.Dialer Control that refuses connections to the
// addresses Refused names: checked on the address actually dialled, after
// name resolution, so a name that resolves (or rebinds) to one is caught.
func refuseControl(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("webhook: unexpected address %q", address)
	}
	if why := Refused(ip); why != "" {
		return &refusedError{ip: ip, why: why}
	}
	return nil
}

type refusedError struct {
	ip  netip.Addr
	why string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("%s is %s; not sent (see --webhook-allow-private)", e.ip, e.why)
}

// dialContext is the dialer of deliveries.
func dialContext(allowPrivate bool, timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if !allowPrivate {
		d.Control = refuseControl
	}
	return d.DialContext
}
