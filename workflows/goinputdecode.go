package workflows

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// ErrTypeInvalidInput is the application error type of a Go pipeline run
// whose input does not fit the pipeline's input type.
const ErrTypeInvalidInput = "InvalidInput"

var ctxType = reflect.TypeOf((*workflow.Context)(nil)).Elem()

// decodingWorkflow wraps a Go pipeline func(workflow.Context, In) (Out,
// error) into one that receives its input as raw JSON and decodes it
// itself. When Temporal decodes a typed input and fails ({"dataset": 5}
// for a string), the workflow task fails on every worker forever and the
// run stays PENDING; decoding here instead ends the run FAILED with the
// decode error. The payload and the commands of a well-formed run are the
// same either way, so histories recorded before still replay.
func decodingWorkflow(name string, fn any) (any, error) {
	v := reflect.ValueOf(fn)
	t := v.Type()
	if t.Kind() != reflect.Func || t.NumIn() != 2 || t.In(0) != ctxType || t.NumOut() != 2 ||
		t.Out(1) != reflect.TypeOf((*error)(nil)).Elem() {
		return nil, fmt.Errorf("go pipeline %s: want func(workflow.Context, In) (Out, error), got %s", name, t)
	}
	inT := t.In(1)
	return func(ctx workflow.Context, raw json.RawMessage) (any, error) {
		in := reflect.New(inT)
		if b := bytes.TrimSpace(raw); len(b) > 0 && !bytes.Equal(b, []byte("null")) {
			if err := json.Unmarshal(b, in.Interface()); err != nil {
				r, _, berr := Begin(ctx, RunOptions{})
				if berr != nil {
					return nil, berr
				}
				msg := fmt.Sprintf("the input does not fit %s's input type %s: %v", name, inT, err)
				return nil, r.End(nil, temporal.NewNonRetryableApplicationError(msg, ErrTypeInvalidInput, nil))
			}
		}
		out := v.Call([]reflect.Value{reflect.ValueOf(ctx), in.Elem()})
		err, _ := out[1].Interface().(error)
		return out[0].Interface(), err
	}, nil
}
