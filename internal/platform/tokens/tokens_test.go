package tokens

import (
	"bytes"
	"testing"

	"github.com/atelier-ml/atelier/internal/catalog"
)

func TestNew(t *testing.T) {
	s1, h1 := New()
	s2, _ := New()
	if s1 == s2 {
		t.Fatal("two secrets are equal")
	}
	if !WellFormed(s1) {
		t.Fatalf("New made a malformed secret %q", s1)
	}
	if !bytes.Equal(h1, Hash(s1)) || len(h1) != 32 {
		t.Fatal("hash mismatch")
	}
	for _, bad := range []string{"", "atl_", "xyz_" + s1[4:], s1 + "A", s1[:len(s1)-1] + "*"} {
		if WellFormed(bad) {
			t.Errorf("WellFormed(%q) = true", bad)
		}
	}
}

func TestAllows(t *testing.T) {
	cases := []struct {
		have, need catalog.Role
		want       bool
	}{
		{catalog.RoleAdmin, catalog.RoleAdmin, true},
		{catalog.RoleAdmin, catalog.RoleViewer, true},
		{catalog.RoleEditor, catalog.RoleAdmin, false},
		{catalog.RoleEditor, catalog.RoleEditor, true},
		{catalog.RoleViewer, catalog.RoleEditor, false},
		{catalog.RoleViewer, catalog.RoleViewer, true},
		{"", catalog.RoleViewer, false},
		{"root", "", false},
	}
	for _, c := range cases {
		if got := Allows(c.have, c.need); got != c.want {
			t.Errorf("Allows(%q, %q) = %v", c.have, c.need, got)
		}
	}
}
