package store

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// A webhook's signing secret is stored sealed (with a secret box) as one
// text value: sealedPrefix, then the key's fingerprint, the wrapped data
// key, the nonce and the ciphertext, each base64, separated by ':'. A
// value without the prefix is one stored in clear (before sealing, or by
// an installation without a key); SealStoredSecrets seals those. A hook
// trigger's secret is stored the same way.
const sealedPrefix = "sealed:v1:"

func webhookOwner(id string) string { return "webhook/" + id }

// sealWebhookSecret returns what to store for a webhook's secret.
func (s *Store) sealWebhookSecret(ctx context.Context, id, secret string) (string, error) {
	return s.sealSecretFor(ctx, webhookOwner(id), secret)
}

// openWebhookSecret returns a webhook's secret from what is stored.
func (s *Store) openWebhookSecret(ctx context.Context, id, stored string) (string, error) {
	return s.openSecretFor(ctx, webhookOwner(id), stored)
}

// sealSecretFor returns what to store for a signing secret of owner (a
// webhook's, a hook trigger's): sealed when the store has a box.
func (s *Store) sealSecretFor(ctx context.Context, owner, secret string) (string, error) {
	if s.box == nil {
		return secret, nil
	}
	v, err := s.box.Seal(ctx, []byte(secret), owner)
	if err != nil {
		return "", err
	}
	return encodeSealed(v), nil
}

// openSecretFor returns owner's signing secret from what is stored.
func (s *Store) openSecretFor(ctx context.Context, owner, stored string) (string, error) {
	if !strings.HasPrefix(stored, sealedPrefix) {
		return stored, nil
	}
	if s.box == nil {
		return "", fmt.Errorf("%s: its secret is sealed and this process has no secrets key (ATELIER_SECRETS_KEY_URL)", owner)
	}
	v, err := decodeSealed(stored)
	if err != nil {
		return "", fmt.Errorf("%s: %w", owner, err)
	}
	b, err := s.box.Open(ctx, v, owner)
	if err != nil {
		return "", fmt.Errorf("%s: %w", owner, err)
	}
	return string(b), nil
}

func encodeSealed(v secretbox.Sealed) string {
	e := base64.RawStdEncoding.EncodeToString
	return sealedPrefix + v.KeyID + ":" + e(v.DataKey) + ":" + e(v.Nonce) + ":" + e(v.Ciphertext)
}

func decodeSealed(s string) (secretbox.Sealed, error) {
	parts := strings.Split(strings.TrimPrefix(s, sealedPrefix), ":")
	if len(parts) != 4 {
		return secretbox.Sealed{}, fmt.Errorf("a sealed secret has 4 parts, got %d", len(parts))
	}
	var out [3][]byte
	for i, p := range parts[1:] {
		b, err := base64.RawStdEncoding.DecodeString(p)
		if err != nil {
			return secretbox.Sealed{}, fmt.Errorf("a sealed secret's part %d is not base64", i+2)
		}
		out[i] = b
	}
	return secretbox.Sealed{KeyID: parts[0], DataKey: out[0], Nonce: out[1], Ciphertext: out[2]}, nil
}

// SealedCounts says how many stored signing secrets SealStoredSecrets
// changed, by owner, and which it could not (a sealed value this
// installation has no key for, a malformed one, a keeper that failed):
// those are left as stored, for the operator to look at, rather than
// stopping every gateway and worker from starting.
type SealedCounts struct {
	Webhooks, Triggers int
	Skipped            []string // "webhook <id>: <why>"
}

// storedSecret is one owner's signing secret as stored (sealed or clear);
// the rows of ListWebhookSecrets and ListTriggerSecrets convert to it.
type storedSecret struct{ ID, Secret string }

func asStored[R ~struct{ ID, Secret string }](rows []R) []storedSecret {
	out := make([]storedSecret, len(rows))
	for i, r := range rows {
		out[i] = storedSecret(r)
	}
	return out
}

// SealStoredSecrets seals the signing secrets stored in clear (webhooks',
// hook triggers') and rewraps those sealed with an old key (rotation), and
// says how many of each it changed. A secret replaced meanwhile is left as
// written. Without a box it does nothing.
func (s *Store) SealStoredSecrets(ctx context.Context) (SealedCounts, error) {
	var out SealedCounts
	if s.box == nil {
		return out, nil
	}
	webhooks, err := s.q.ListWebhookSecrets(ctx)
	if err != nil {
		return out, mapErr(err, "list webhook secrets")
	}
	out.Webhooks, err = s.sealStored(ctx, "webhook", webhookOwner, asStored(webhooks), &out.Skipped, func(r storedSecret, sealed string) (int64, error) {
		return s.q.ReplaceWebhookSecret(ctx, db.ReplaceWebhookSecretParams{ID: r.ID, Old: r.Secret, Sealed: sealed})
	})
	if err != nil {
		return out, err
	}
	triggers, err := s.q.ListTriggerSecrets(ctx)
	if err != nil {
		return out, mapErr(err, "list trigger secrets")
	}
	out.Triggers, err = s.sealStored(ctx, "trigger", triggerOwner, asStored(triggers), &out.Skipped, func(r storedSecret, sealed string) (int64, error) {
		return s.q.ReplaceTriggerSecret(ctx, db.ReplaceTriggerSecretParams{ID: r.ID, Old: r.Secret, Sealed: sealed})
	})
	return out, err
}

// sealStored seals the secrets of rows stored in clear (for owner(id)) and
// rewraps those sealed with an old key, storing each with replace (a
// compare-and-swap on the stored value: 0 rows when it changed meanwhile),
// and says how many it changed. A row it cannot seal or rewrap is added
// to skipped and left as it is; only the database's errors are returned.
// kind names the owners in messages.
func (s *Store) sealStored(ctx context.Context, kind string, owner func(id string) string, rows []storedSecret,
	skipped *[]string, replace func(r storedSecret, sealed string) (int64, error),
) (int, error) {
	n := 0
	for _, r := range rows {
		next, changed, err := s.resealed(ctx, owner(r.ID), r.Secret)
		if err != nil {
			*skipped = append(*skipped, fmt.Sprintf("%s %s: %v", kind, r.ID, err))
			continue
		}
		if !changed {
			continue
		}
		done, err := replace(r, next)
		if err != nil {
			return n, mapErr(err, "seal %s %s's secret", kind, r.ID)
		}
		n += int(done)
	}
	return n, nil
}

// resealed is a stored secret sealed with the current key: sealed if in
// clear, its data key rewrapped if sealed with an old key; changed is
// false when it already was.
func (s *Store) resealed(ctx context.Context, owner, stored string) (string, bool, error) {
	if !strings.HasPrefix(stored, sealedPrefix) {
		next, err := s.sealSecretFor(ctx, owner, stored)
		return next, err == nil, err
	}
	v, err := decodeSealed(stored)
	if err != nil {
		return "", false, err
	}
	w, changed, err := s.box.Rewrap(ctx, v)
	if err != nil || !changed {
		return "", false, err
	}
	return encodeSealed(w), true, nil
}
