package tokens

import (
	"bytes"
	"testing"
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
		have, need Role
		want       bool
	}{
		{RoleAdmin, RoleAdmin, true},
		{RoleAdmin, RoleViewer, true},
		{RoleEditor, RoleAdmin, false},
		{RoleEditor, RoleEditor, true},
		{RoleViewer, RoleEditor, false},
		{RoleViewer, RoleViewer, true},
		{"", RoleViewer, false},
		{"root", "", false},
	}
	for _, c := range cases {
		if got := Allows(c.have, c.need); got != c.want {
			t.Errorf("Allows(%q, %q) = %v", c.have, c.need, got)
		}
	}
}
