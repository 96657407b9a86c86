// Package grant seals and opens what one attempt's launcher may do (package
// launch): the workers seal a Grant with the installation's secrets key
// and hand it to the pod in the attempt's Secret; the gateway opens it on
// each of the launcher's requests. It is apart from package launch so that
// the launcher binary carries no key management.
package grant

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/atelier-ml/atelier/internal/platform/secretbox"
)

// Grant is what one attempt's launcher may do: read its inputs, and write
// into its project's part of the store, until Expires and while its run
// is open. An endpoint revision's grant reads its model, while the
// endpoint exists, and writes nothing. It travels sealed (Seal), so the pod can neither read nor
// change it.
type Grant struct {
	Project string `json:"project"`
	// Run, Step, Item and Attempt name a step's attempt; or Endpoint and
	// Revision an inference revision whose pods fetch its model (a grant
	// then dies with its endpoint).
	Run      string       `json:"run,omitempty"`
	Step     string       `json:"step,omitempty"`
	Item     *int         `json:"item,omitempty"`
	Attempt  int          `json:"attempt,omitempty"`
	Endpoint string       `json:"endpoint,omitempty"`
	Revision int          `json:"revision,omitempty"`
	Inputs   []GrantInput `json:"inputs,omitempty"`
	Expires  time.Time    `json:"expires"`
}

// GrantInput is an input the grant reads: the object, and, for a
// directory (Files > 0), the files its manifest lists.
type GrantInput struct {
	Digest string `json:"digest"`
	Files  int    `json:"files,omitempty"`
}

// Writes reports whether the grant may store objects (a step's; an
// endpoint's only reads its model).
func (g Grant) Writes() bool { return g.Endpoint == "" }

// Reads reports whether digest is one of the grant's inputs.
func (g Grant) Reads(digest string) bool {
	return slices.ContainsFunc(g.Inputs, func(in GrantInput) bool { return in.Digest == digest })
}

// Box seals and opens grants (secretbox.Box, the installation's secrets
// key: the workers seal, the gateway opens).
type Box interface {
	Seal(ctx context.Context, value []byte, owner string) (secretbox.Sealed, error)
	Open(ctx context.Context, s secretbox.Sealed, owner string) ([]byte, error)
}

var _ Box = (*secretbox.Box)(nil)

// grantOwner binds sealed grants to their use: a grant cannot be passed
// off as a project secret, nor the reverse.
const grantOwner = "atelier.launch-grant/v1"

// ErrBadGrant is returned for a token that is not a grant this
// installation sealed, or whose time is up.
var ErrBadGrant = errors.New("not a valid launcher grant")

// Seal seals g into a token.
func Seal(ctx context.Context, box Box, g Grant) (string, error) {
	b, err := json.Marshal(g)
	if err != nil {
		return "", err
	}
	s, err := box.Seal(ctx, b, grantOwner)
	if err != nil {
		return "", fmt.Errorf("seal the launcher's grant: %w", err)
	}
	sb, err := json.Marshal(s)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(sb), nil
}

// Open opens a token Seal made; ErrBadGrant when it is not one, or has
// expired at now.
func Open(ctx context.Context, box Box, token string, now time.Time) (Grant, error) {
	sb, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return Grant{}, ErrBadGrant
	}
	var s secretbox.Sealed
	if err := json.Unmarshal(sb, &s); err != nil {
		return Grant{}, ErrBadGrant
	}
	b, err := box.Open(ctx, s, grantOwner)
	if err != nil {
		return Grant{}, fmt.Errorf("%w: %v", ErrBadGrant, err)
	}
	var g Grant
	if err := json.Unmarshal(b, &g); err != nil {
		return Grant{}, ErrBadGrant
	}
	if !now.Before(g.Expires) {
		return Grant{}, fmt.Errorf("%w: it expired at %s", ErrBadGrant, g.Expires.UTC().Format(time.RFC3339))
	}
	return g, nil
}
