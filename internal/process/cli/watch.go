package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/atelier-ml/atelier/api/gen"
)

// watch follows a run over its SSE stream (reconnecting with
// Last-Event-ID when the stream drops), drawing the step table on stderr
// (redrawn in place on a terminal, a line per change otherwise), then
// prints the final run on stdout and returns the run's exit status.
func (o *options) watch(cmd *cobra.Command, s *session, id string) error {
	w := &watcher{o: o, tty: isTerminal(o.stderr), steps: map[string]gen.StepStatus{}}
	lastID := ""
	for failures := 0; ; {
		done, err := w.stream(cmd.Context(), s, id, &lastID)
		if done {
			break
		}
		if err != nil {
			var pe *ProblemError
			if errors.As(err, &pe) || cmd.Context().Err() != nil {
				return err
			}
			if failures++; failures > 5 {
				return err
			}
			fmt.Fprintf(o.stderr, "stream interrupted (%v); reconnecting\n", err)
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-time.After(time.Duration(failures) * time.Second):
		}
	}
	run, err := getRun(cmd, s, id)
	if err != nil {
		return err
	}
	if err := o.print(o.stdout, run, func() table { return stepsTable(o, run.Status) }); err != nil {
		return err
	}
	return exitFor(run.State, run.Status)
}

// exitFor is the exit status of a finished run (see the package doc).
func exitFor(state gen.RunState, st *gen.RunStatus) error {
	why := ""
	if st != nil {
		why = str(st.Error)
	}
	switch state {
	case gen.RunStateSUCCEEDED:
		return nil
	case gen.RunStateFAILED:
		return &ExitError{Code: 2, Err: fmt.Errorf("run FAILED: %s", first(why, "see its steps"))}
	default:
		return &ExitError{Code: 3, Err: fmt.Errorf("run %s", state)}
	}
}

type watcher struct {
	o     *options
	tty   bool
	run   gen.RunStatus
	order []string
	steps map[string]gen.StepStatus
	drawn int // lines drawn last time (tty redraw)
}

// stream reads one SSE connection; done when the run reached a terminal
// state.
func (w *watcher) stream(ctx context.Context, s *session, id string, lastID *string) (bool, error) {
	p := &gen.StreamRunEventsParams{}
	if *lastID != "" {
		p.LastEventID = lastID
	}
	res, err := s.c.StreamRunEvents(ctx, s.Project, id, p)
	if err != nil {
		return false, unreachable(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
		return false, expect(res, body, http.StatusOK)
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var name string
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if name != "" && data.Len() > 0 {
				if w.apply(name, data.Bytes()) {
					return true, nil
				}
			}
			name = ""
			data.Reset()
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			*lastID = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data.WriteString(strings.TrimPrefix(line, "data: "))
		}
	}
	if err := sc.Err(); err != nil {
		return false, err
	}
	return false, io.ErrUnexpectedEOF
}

// apply takes one event; true once the run is terminal.
func (w *watcher) apply(name string, data []byte) bool {
	switch name {
	case "step":
		var st gen.StepStatus
		if json.Unmarshal(data, &st) != nil {
			return false
		}
		if _, seen := w.steps[st.Name]; !seen {
			w.order = append(w.order, st.Name)
		}
		w.steps[st.Name] = st
		if !w.tty {
			fmt.Fprintln(w.o.stderr, strings.Join(stepRow(w.o, st)[:6], "  "))
		}
	case "run":
		if json.Unmarshal(data, &w.run) != nil {
			return false
		}
		if !w.tty {
			fmt.Fprintf(w.o.stderr, "run %s\n", w.run.State)
		}
	default:
		return false
	}
	if w.tty {
		w.draw()
	}
	return terminal(w.run.State)
}

func (w *watcher) draw() {
	t := table{{"STEP", "KIND", "STATE", "ATTEMPT", "DURATION", "PROGRESS", "MESSAGE"}}
	for _, n := range w.order {
		t = append(t, stepRow(w.o, w.steps[n]))
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "run %s  %s\n", w.run.RunId, w.run.State)
	_ = writeTable(&b, t)
	if w.drawn > 0 {
		fmt.Fprintf(w.o.stderr, "\033[%dA\033[J", w.drawn) // back to the top of the last drawing
	}
	w.drawn = bytes.Count(b.Bytes(), []byte("\n"))
	_, _ = w.o.stderr.Write(b.Bytes())
}

func terminal(s gen.RunState) bool {
	switch s {
	case gen.RunStateSUCCEEDED, gen.RunStateFAILED, gen.RunStateCANCELLED, gen.RunStateTERMINATED:
		return true
	}
	return false
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
