package pipeline

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/vm/runtime"
)

// Expressions run inside the workflow task of a shared worker, so one
// tenant's template must not be able to exhaust its memory or CPU: a worker
// killed by `repeat(repeat("x", 999999), 20000)` hands the workflow task to
// the next worker, which dies too. expr-lang's own memory budget is charged
// only after a builtin has allocated its result, and not at all for string
// concatenation, so Atelier meters evaluation itself:
//
//   - every predicate iteration (map, filter, reduce, all, ...) is a tick and
//     charges the size of its result;
//   - string and list concatenation (+), repeat, replace and join charge the
//     size of their result before allocating it.
//
// Exceeding either bound fails the evaluation with ErrBudget, which fails
// the step with a message saying so. The bounds depend only on the
// expression and its inputs, so replay sees the same outcome.
const (
	// MaxEvalSteps bounds predicate iterations per evaluation (CPU time: a
	// million cheap iterations take well under a second on one core).
	MaxEvalSteps = 1_000_000
	// MaxEvalBytes bounds what one evaluation may allocate in strings and
	// lists.
	MaxEvalBytes = 4 << 20
	// MaxRenderedValue bounds one rendered template value (an argument, an
	// env value, ...).
	MaxRenderedValue = 64 << 10
	// MaxRenderedStep bounds everything rendered for one step.
	MaxRenderedStep = 256 << 10
)

// ErrBudget is returned (wrapped) when an expression exceeds MaxEvalSteps
// or MaxEvalBytes, or a rendered value exceeds its size limit.
var ErrBudget = errors.New("over budget")

// Names the budget patcher introduces; users cannot write them because
// validation rejects unknown names.
const (
	budgetVar = "__atelier_budget"
	addFn     = "__atelier_add"
	tickFn    = "__atelier_tick"
)

// evalBudget is the meter of one evaluation.
type evalBudget struct {
	steps, maxSteps int
	bytes, maxBytes int
}

func (b *evalBudget) alloc(n int) error {
	b.bytes += n
	if b.bytes > b.maxBytes {
		return fmt.Errorf("expression %w: it would allocate more than %d MiB", ErrBudget, b.maxBytes>>20)
	}
	return nil
}

func (b *evalBudget) tick(v any) error {
	b.steps++
	if b.steps > b.maxSteps {
		return fmt.Errorf("expression %w: more than %d loop iterations", ErrBudget, b.maxSteps)
	}
	return b.alloc(sizeOf(v))
}

// sizeOf approximates the bytes a value holds: exact for strings, a word per
// element for lists and two per map entry (their elements were charged when
// they were made).
func sizeOf(v any) int {
	switch x := v.(type) {
	case string:
		return len(x)
	case []any:
		return 8 * len(x)
	case map[string]any:
		return 16 * len(x)
	case nil, bool, int, float64:
		return 0
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String:
		return rv.Len()
	case reflect.Slice, reflect.Array:
		return 8 * rv.Len()
	case reflect.Map:
		return 16 * rv.Len()
	}
	return 0
}

func budgetArg(fn string, args []any, n int) (*evalBudget, error) {
	if len(args) != n+1 {
		return nil, fmt.Errorf("%s: want %d arguments, got %d", fn, n, len(args)-1)
	}
	b, ok := args[0].(*evalBudget)
	if !ok {
		return nil, fmt.Errorf("%s: internal error: no budget", fn)
	}
	return b, nil
}

// budgetPatcher rewrites the allocating operations of a program into
// metered calls (see above). It runs after lookupPatcher.
type budgetPatcher struct{}

func (budgetPatcher) Visit(node *ast.Node) {
	budget := func() ast.Node { return &ast.IdentifierNode{Value: budgetVar} }
	switch n := (*node).(type) {
	case *ast.BinaryNode:
		if n.Operator == "+" {
			ast.Patch(node, &ast.CallNode{
				Callee:    &ast.IdentifierNode{Value: addFn},
				Arguments: []ast.Node{budget(), n.Left, n.Right},
			})
		}
	case *ast.PredicateNode:
		n.Node = &ast.CallNode{
			Callee:    &ast.IdentifierNode{Value: tickFn},
			Arguments: []ast.Node{budget(), n.Node},
		}
	case *ast.CallNode:
		id, ok := n.Callee.(*ast.IdentifierNode)
		if !ok {
			return
		}
		if _, metered := meteredBuiltins[id.Value]; metered {
			n.Arguments = append([]ast.Node{budget()}, n.Arguments...)
		}
	}
}

// meteredBuiltins replace expr's builtins of the same name: they compute
// the size of their result before making it.
var meteredBuiltins = map[string]func(args ...any) (any, error){
	"repeat":  meteredRepeat,
	"replace": meteredReplace,
	"join":    meteredJoin,
}

// meteredNames lists meteredBuiltins' keys in a fixed order.
var meteredNames = []string{"join", "repeat", "replace"}

func meteredAdd(args ...any) (any, error) {
	b, err := budgetArg("+", args, 2)
	if err != nil {
		return nil, err
	}
	x, y := args[1], args[2]
	if xs, ok := x.(string); ok {
		if ys, ok := y.(string); ok {
			if err := b.alloc(len(xs) + len(ys)); err != nil {
				return nil, err
			}
			return xs + ys, nil
		}
	}
	if kx, ky := reflect.ValueOf(x).Kind(), reflect.ValueOf(y).Kind(); (kx == reflect.Slice || kx == reflect.Array) && (ky == reflect.Slice || ky == reflect.Array) {
		if err := b.alloc(sizeOf(x) + sizeOf(y)); err != nil {
			return nil, err
		}
	}
	return runtime.Add(x, y), nil
}

func meteredTick(args ...any) (any, error) {
	b, err := budgetArg("loop", args, 1)
	if err != nil {
		return nil, err
	}
	if err := b.tick(args[1]); err != nil {
		return nil, err
	}
	return args[1], nil
}

func meteredRepeat(args ...any) (any, error) {
	b, err := budgetArg("repeat", args, 2)
	if err != nil {
		return nil, err
	}
	s, ok := args[1].(string)
	if !ok {
		return nil, fmt.Errorf("repeat: first argument must be a string, got %s", describeValue(args[1]))
	}
	n := runtime.ToInt(args[2])
	if n < 0 {
		return nil, fmt.Errorf("repeat: count must not be negative, got %d", n)
	}
	if n > 0 && len(s) > (b.maxBytes+1)/n {
		return nil, fmt.Errorf("repeat: %d × %d bytes: expression %w (limit %d MiB)", n, len(s), ErrBudget, b.maxBytes>>20)
	}
	if err := b.alloc(len(s) * n); err != nil {
		return nil, err
	}
	return strings.Repeat(s, n), nil
}

func meteredReplace(args ...any) (any, error) {
	b, err := budgetArg("replace", args, 3)
	if err != nil {
		return nil, err
	}
	s, ok1 := args[1].(string)
	old, ok2 := args[2].(string)
	repl, ok3 := args[3].(string)
	if !ok1 || !ok2 || !ok3 {
		return nil, errors.New("replace: want three strings: replace(s, old, new)")
	}
	size := len(s)
	if grow := len(repl) - len(old); grow > 0 {
		count := strings.Count(s, old)
		if count > 0 && grow > (b.maxBytes+1)/count {
			return nil, fmt.Errorf("replace: expression %w (limit %d MiB)", ErrBudget, b.maxBytes>>20)
		}
		size += count * grow
	}
	if err := b.alloc(size); err != nil {
		return nil, err
	}
	return strings.ReplaceAll(s, old, repl), nil
}

func meteredJoin(args ...any) (any, error) {
	if len(args) == 2 {
		args = append(args, "") // join(list) joins with ""
	}
	b, err := budgetArg("join", args, 2)
	if err != nil {
		return nil, err
	}
	list, err := toList(args[1])
	if err != nil {
		return nil, fmt.Errorf("join: %w", err)
	}
	sep, ok := args[2].(string)
	if !ok {
		return nil, errors.New("join: the separator must be a string")
	}
	parts := make([]string, len(list))
	size := len(sep) * max(len(list)-1, 0)
	for i, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("join: element %d is %s, not a string", i, describeValue(v))
		}
		parts[i] = s
		size += len(s)
	}
	if err := b.alloc(size); err != nil {
		return nil, err
	}
	return strings.Join(parts, sep), nil
}
