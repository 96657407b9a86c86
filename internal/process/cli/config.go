package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"
)

// Context is one Atelier installation and identity: where the gateway is,
// the token to present and the project commands act on.
type Context struct {
	URL     string `json:"url"`
	Token   string `json:"token"`
	Project string `json:"project,omitempty"`
}

// File is the config file `atelier login` writes.
type File struct {
	Current  string             `json:"current"`
	Contexts map[string]Context `json:"contexts"`
}

// configPath is $ATELIER_CONFIG, else <user config dir>/atelier/config.yaml.
func configPath() (string, error) {
	if p := os.Getenv("ATELIER_CONFIG"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("no config directory (set ATELIER_CONFIG): %w", err)
	}
	return filepath.Join(dir, "atelier", "config.yaml"), nil
}

// loadFile reads the config file; a missing file is an empty config.
func loadFile() (File, string, error) {
	path, err := configPath()
	if err != nil {
		return File{}, "", err
	}
	f := File{Contexts: map[string]Context{}}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return f, path, nil
	}
	if err != nil {
		return f, path, fmt.Errorf("read %s: %w", path, err)
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return f, path, fmt.Errorf("%s: %w", path, err)
	}
	if f.Contexts == nil {
		f.Contexts = map[string]Context{}
	}
	return f, path, nil
}

// save writes the file atomically, readable by its owner only: it holds
// tokens.
func (f File) save(path string) error {
	b, err := yaml.Marshal(f)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*.yaml")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// target resolves where a command goes: flags, then environment, then the
// config file's context (--context or the current one).
func (o *options) target() (Context, error) {
	var c Context
	f, path, err := loadFile()
	if err != nil {
		return c, err
	}
	name := first(o.context, f.Current)
	if name != "" {
		var ok bool
		if c, ok = f.Contexts[name]; !ok && o.context != "" {
			return c, fmt.Errorf("no context %q in %s", name, path)
		}
	}
	c.URL = first(o.url, os.Getenv("ATELIER_URL"), c.URL)
	c.Token = first(o.token, os.Getenv("ATELIER_TOKEN"), c.Token)
	c.Project = first(o.project, os.Getenv("ATELIER_PROJECT"), c.Project, defaultProject)
	if c.URL == "" {
		return c, errors.New("no Atelier to talk to: run `atelier login URL --token TOKEN`, or set ATELIER_URL and ATELIER_TOKEN")
	}
	return c, nil
}

// defaultProject is the project `atelier dev` creates.
const defaultProject = "default"

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
