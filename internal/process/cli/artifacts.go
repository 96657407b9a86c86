package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
)

func artifactsCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "artifacts", Short: "List, inspect and download the artifacts runs wrote and read", GroupID: GroupID}
	ls := &cobra.Command{
		Use:   "ls RUN",
		Short: "What a run wrote and read",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.ListRunArtifactsWithResponse(cmd.Context(), s.Project, args[0])
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table {
				t := table{{"", "ID", "STEP", "NAME", "TYPE", "SIZE", "DIGEST"}}
				for _, a := range res.JSON200.Produced {
					t = append(t, []string{"wrote", a.Id, stepLabel(a.Producer.Step, a.Producer.Item), a.Name, a.Type, artifactSize(a), shortDigest(a.Digest)})
				}
				for _, c := range res.JSON200.Consumed {
					a := c.Artifact
					t = append(t, []string{"read", a.Id, stepLabel(c.Use.Step, c.Use.Item), c.Use.Input + " <- " + a.Producer.Step + "." + a.Name, a.Type, artifactSize(a), shortDigest(a.Digest)})
				}
				return t
			})
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "One artifact: who wrote it, from what, and who read it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.GetArtifactWithResponse(cmd.Context(), s.Project, args[0])
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			l := res.JSON200
			return o.print(o.stdout, l, func() table {
				a := l.Artifact
				t := table{
					{"ARTIFACT", a.Id},
					{"NAME", a.Name + " (" + a.Type + ")"},
					{"SIZE", artifactSize(a)},
					{"DIGEST", a.Digest},
					{"WRITTEN BY", fmt.Sprintf("run %s, step %s, attempt %d", a.Producer.Run, stepLabel(a.Producer.Step, a.Producer.Item), a.Producer.Attempt)},
				}
				for _, m := range l.MadeFrom {
					t = append(t, []string{"MADE FROM", fmt.Sprintf("%s = %s (%s.%s of run %s)", m.Use.Input, m.Artifact.Id, m.Artifact.Producer.Step, m.Artifact.Name, m.Artifact.Producer.Run)})
				}
				for _, u := range l.Consumers {
					t = append(t, []string{"READ BY", fmt.Sprintf("run %s, step %s, as %s", u.Run, stepLabel(u.Step, u.Item), u.Input)})
				}
				return t
			})
		},
	}
	var to string
	get := &cobra.Command{
		Use:   "get ID [--to PATH]",
		Short: "Download an artifact (a file, or every file of a directory) to PATH (default: its name)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.GetArtifactWithResponse(cmd.Context(), s.Project, args[0])
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			a := res.JSON200.Artifact
			dest := to
			if dest == "" {
				dest = a.Name
			}
			if _, err := os.Lstat(dest); err == nil {
				return fmt.Errorf("%s exists: choose another path with --to", dest)
			}
			d := &downloader{s: s, ctx: cmd.Context(), id: a.Id, total: a.Size, start: time.Now()}
			if isTerminal(o.stderr) {
				d.progress = o.stderr // a progress line only where it can be redrawn
			}
			if a.Files == nil || *a.Files == 0 {
				err = d.file("", dest)
			} else {
				err = d.dir(dest)
			}
			if err != nil {
				return err
			}
			if d.progress != nil {
				fmt.Fprint(o.stderr, "\r\033[K")
			}
			fmt.Fprintf(o.stderr, "downloaded %s (%s) to %s in %s\n", a.Name, artifactstore.HumanBytes(d.done), dest, time.Since(d.start).Round(time.Millisecond))
			return nil
		},
	}
	get.Flags().StringVar(&to, "to", "", "where to write the file or directory (must not exist)")
	cmd.AddCommand(ls, show, get)
	return cmd
}

// downloader fetches artifact bytes: from the signed URL the gateway
// redirects to (without the Atelier token: the URL carries its own
// authorization), or streamed by the gateway.
type downloader struct {
	s        *session
	ctx      context.Context
	id       string
	progress io.Writer // nil: no progress line (not a terminal)
	total    int64
	done     int64
	start    time.Time
	last     time.Time
}

func (d *downloader) dir(dest string) error {
	res, err := d.s.c.ListArtifactFilesWithResponse(d.ctx, d.s.Project, d.id)
	if err != nil {
		return unreachable(err)
	}
	if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
		return err
	}
	tmp := dest + ".partial"
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, f := range res.JSON200.Files {
		p := filepath.Join(tmp, filepath.FromSlash(f.Path))
		if !strings.HasPrefix(p, tmp+string(filepath.Separator)) {
			return fmt.Errorf("the artifact names a file outside its directory: %q", f.Path)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := d.file(f.Path, p); err != nil {
			return err
		}
		if f.Executable != nil && *f.Executable {
			_ = os.Chmod(p, 0o755)
		}
	}
	return os.Rename(tmp, dest)
}

func (d *downloader) file(path, dest string) error {
	u, err := url.Parse(strings.TrimRight(d.s.URL, "/") + "/v1/projects/" + url.PathEscape(d.s.Project) + "/artifacts/" + url.PathEscape(d.id) + "/content")
	if err != nil {
		return err
	}
	if path != "" {
		u.RawQuery = url.Values{"path": {path}}.Encode()
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(d.ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if d.s.Token != "" {
		req.Header.Set("Authorization", "Bearer "+d.s.Token)
	}
	req.Header.Set("User-Agent", "atelier-cli")
	res, err := noFollow.Do(req)
	if err != nil {
		return unreachable(err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusTemporaryRedirect {
		loc := res.Header.Get("Location")
		sreq, err := http.NewRequestWithContext(d.ctx, http.MethodGet, loc, nil)
		if err != nil {
			return err
		}
		sres, err := http.DefaultClient.Do(sreq)
		if err != nil {
			return fmt.Errorf("download from the artifact store: %w", err)
		}
		defer sres.Body.Close()
		if sres.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(sres.Body, 1024))
			return fmt.Errorf("the artifact store answered %s: %s", sres.Status, strings.TrimSpace(string(body)))
		}
		res = sres
	} else if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
		return expect(res, body, http.StatusOK)
	}
	f, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = io.Copy(f, &progressReader{r: res.Body, d: d})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), dest)
}

type progressReader struct {
	r io.Reader
	d *downloader
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	d := p.d
	d.done += int64(n)
	if now := time.Now(); d.progress != nil && now.Sub(d.last) > 500*time.Millisecond {
		d.last = now
		fmt.Fprintf(d.progress, "\r%s of %s", artifactstore.HumanBytes(d.done), artifactstore.HumanBytes(d.total))
	}
	return n, err
}

func stepLabel(step string, item *int) string {
	if item == nil {
		return step
	}
	return step + "[" + strconv.Itoa(*item) + "]"
}

func artifactSize(a gen.Artifact) string {
	if a.Files != nil && *a.Files > 0 {
		return fmt.Sprintf("%s in %d files", artifactstore.HumanBytes(a.Size), *a.Files)
	}
	return artifactstore.HumanBytes(a.Size)
}

func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
