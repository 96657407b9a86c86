package pipeline

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/expr-lang/expr"
	"github.com/expr-lang/expr/ast"
	"github.com/expr-lang/expr/file"
	"github.com/expr-lang/expr/parser"
	"github.com/expr-lang/expr/types"
	"github.com/expr-lang/expr/vm"
	"github.com/expr-lang/expr/vm/runtime"
)

// disabledBuiltins maps a removed builtin to why, for validation messages.
var disabledBuiltins = map[string]string{
	"now":      "now() is not available: pipeline expressions must give the same result when a run is replayed; use run.id or a param",
	"date":     "date() is not available: its result depends on the host time zone; pass dates as string params",
	"timezone": "timezone() is not available: its result depends on the host time zone database",
}

// disabledNames lists disabledBuiltins' keys in a fixed order.
var disabledNames = []string{"date", "now", "timezone"}

// getFn is the checked member lookup the patcher substitutes for member
// access; the name cannot collide with user code because validation rejects
// any function call that is not a builtin.
const getFn = "__atelier_get"

// compileEnv types the four top-level names as untyped values so a program
// compiled once works for any params and outputs; "item" must be declared as
// any (not nil) or expr would type it as nil and reject item * 2.
var compileEnv = types.Map{
	"params": types.TypeOf(map[string]any{}),
	"steps":  types.TypeOf(map[string]any{}),
	"item":   types.Any,
	"run":    types.TypeOf(map[string]any{}),
	// budgetVar carries the evaluation's meter (budget.go).
	budgetVar: types.Any,
}

type exprMode int

const (
	modeValue exprMode = iota // template or forEach.items: any result
	modeBool                  // when: must be a boolean
)

type progKey struct {
	src  string
	mode exprMode
}

// progCache holds compiled programs. Compilation is deterministic and
// vm.Program is safe for concurrent use, so caching cannot change results.
// The size cap bounds memory in a long-lived worker.
var progCache = struct {
	sync.Mutex
	m map[progKey]*vm.Program
}{m: map[progKey]*vm.Program{}}

const progCacheMax = 4096

func compileExpr(src string, mode exprMode) (*vm.Program, error) {
	k := progKey{src, mode}
	progCache.Lock()
	p, ok := progCache.m[k]
	progCache.Unlock()
	if ok {
		return p, nil
	}
	opts := []expr.Option{
		expr.Env(compileEnv),
		expr.Function(getFn, checkedGet),
		expr.Function("keys", sortedKeys),
		expr.Function("values", sortedValues),
		expr.Function("toPairs", sortedPairs),
	}
	for _, name := range disabledNames {
		opts = append(opts, expr.DisableBuiltin(name))
	}
	exempt := map[ast.Node]bool{}
	opts = append(opts,
		expr.Patch(&exemptMarker{set: exempt}),
		expr.Patch(&lookupPatcher{exempt: exempt, paths: map[ast.Node]string{}}))
	if mode == modeBool {
		opts = append(opts, expr.AsBool())
	}
	// Type errors come from the program as written; the metered program
	// (budget.go) calls functions taking any, which the checker cannot fault.
	if _, err := expr.Compile(src, opts...); err != nil {
		return nil, errors.New(exprErrorMessage(err, true))
	}
	opts = append(opts, expr.Patch(budgetPatcher{}),
		expr.Function(addFn, meteredAdd), expr.Function(tickFn, meteredTick))
	for _, name := range meteredNames {
		opts = append(opts, expr.Function(name, meteredBuiltins[name]))
	}
	p, err := expr.Compile(src, opts...)
	if err != nil {
		return nil, errors.New(exprErrorMessage(err, true))
	}
	progCache.Lock()
	if len(progCache.m) < progCacheMax {
		progCache.m[k] = p
	}
	progCache.Unlock()
	return p, nil
}

// exprErrorMessage turns expr's multi-line error (with a source snippet) into
// one line, since problems are shown one per line.
// The column helps with a syntax error but is noise for a runtime error,
// hence withColumn.
func exprErrorMessage(err error, withColumn bool) string {
	var fe *file.Error
	if errors.As(err, &fe) {
		if withColumn && fe.Line > 0 && fe.Snippet != "" {
			return fmt.Sprintf("%s (at column %d)", fe.Message, fe.Column+1)
		}
		return fe.Message
	}
	return strings.ReplaceAll(err.Error(), "\n", " ")
}

// runExpr evaluates a program against env.
func runExpr(src string, mode exprMode, env Env) (any, error) {
	p, err := compileExpr(src, mode)
	if err != nil {
		return nil, err
	}
	vars := env.exprEnv()
	b := &evalBudget{maxSteps: MaxEvalSteps, maxBytes: MaxEvalBytes}
	if env.Limits != nil {
		b.maxSteps, b.maxBytes = env.Limits.Steps, env.Limits.Bytes
	}
	vars[budgetVar] = b
	v, err := expr.Run(p, vars)
	if err != nil {
		return nil, errors.New(exprErrorMessage(err, false))
	}
	return v, nil
}

// exemptMarker records member accesses written in an optional context (the
// left of ?? or inside a ?. chain), where a missing key must stay nil.
type exemptMarker struct{ set map[ast.Node]bool }

func (m *exemptMarker) Visit(node *ast.Node) {
	switch n := (*node).(type) {
	case *ast.BinaryNode:
		if n.Operator == "??" {
			ast.Walk(&n.Left, memberCollector(m.set))
		}
	case *ast.ChainNode:
		ast.Walk(&n.Node, memberCollector(m.set))
	}
}

type memberCollector map[ast.Node]bool

func (c memberCollector) Visit(node *ast.Node) {
	if m, ok := (*node).(*ast.MemberNode); ok {
		c[m] = true
	}
}

// lookupPatcher rewrites a.b (rooted at params, steps, item or run) into
// __atelier_get(a, "b", "<path of a>") so a missing key is an error that
// names the path. Visits are post-order, so inner accesses are rewritten
// first; paths remembers the source path of each rewritten node.
type lookupPatcher struct {
	exempt map[ast.Node]bool
	paths  map[ast.Node]string
}

func (l *lookupPatcher) Visit(node *ast.Node) {
	m, ok := (*node).(*ast.MemberNode)
	if !ok || m.Method || m.Optional || l.exempt[m] {
		return
	}
	if !l.rooted(m.Node) {
		return
	}
	base := l.path(m.Node)
	call := &ast.CallNode{
		Callee:    &ast.IdentifierNode{Value: getFn},
		Arguments: []ast.Node{m.Node, m.Property, &ast.StringNode{Value: base}},
	}
	ast.Patch(node, call)
	l.paths[call] = base + propertyPath(m.Property)
}

func (l *lookupPatcher) rooted(n ast.Node) bool {
	if _, ok := l.paths[n]; ok {
		return true
	}
	if id, ok := n.(*ast.IdentifierNode); ok {
		switch id.Value {
		case "params", "steps", "item", "run":
			return true
		}
	}
	return false
}

func (l *lookupPatcher) path(n ast.Node) string {
	if p, ok := l.paths[n]; ok {
		return p
	}
	return n.String()
}

func propertyPath(p ast.Node) string {
	switch v := p.(type) {
	case *ast.StringNode:
		return propertyOf(v.Value)
	case *ast.IntegerNode:
		return fmt.Sprintf("[%d]", v.Value)
	}
	return "[…]"
}

// checkedGet is the runtime half of lookupPatcher.
func checkedGet(args ...any) (out any, err error) {
	if len(args) != 3 {
		return nil, fmt.Errorf("%s: want 3 arguments", getFn)
	}
	from, k := args[0], args[1]
	path, _ := args[2].(string)
	switch v := from.(type) {
	case map[string]any:
		s, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("%s is an object; index it with a string key, not %v", path, k)
		}
		val, ok := v[s]
		if !ok {
			if path == "steps" {
				return nil, fmt.Errorf("outputs of step %q are not available (the step has not run)", s)
			}
			return nil, fmt.Errorf("%s has no key %q", path, s)
		}
		return val, nil
	case []any:
		i, ok := toIndex(k)
		if !ok {
			return nil, fmt.Errorf("%s is a list; index it with a number (e.g. %s[0]), not %q", path, path, fmt.Sprint(k))
		}
		j := i
		if j < 0 {
			j += len(v)
		}
		if j < 0 || j >= len(v) {
			return nil, fmt.Errorf("%s has no index %d (length %d)", path, i, len(v))
		}
		return v[j], nil
	case nil:
		return nil, fmt.Errorf("%s is null; cannot read %s", path, strings.TrimPrefix(propertyOf(k), "."))
	}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%s is %s; cannot read %s", path, describeValue(from), strings.TrimPrefix(propertyOf(k), "."))
		}
	}()
	return runtime.Fetch(from, k), nil
}

// propertyOf formats a key as it would follow a path: .name, ["a b"] or [0].
func propertyOf(k any) string {
	switch v := k.(type) {
	case string:
		if identRE.MatchString(v) {
			return "." + v
		}
		return "[" + strconv.Quote(v) + "]"
	case int:
		return fmt.Sprintf("[%d]", v)
	}
	return fmt.Sprintf("[%v]", k)
}

func toIndex(k any) (int, bool) {
	switch v := k.(type) {
	case int:
		return v, true
	case int64:
		return int(v), true
	case float64:
		if v == float64(int(v)) {
			return int(v), true
		}
	}
	return 0, false
}

// sortedMapKeys returns a map's keys in a deterministic order.
func sortedMapKeys(v reflect.Value) []reflect.Value {
	ks := v.MapKeys()
	sort.Slice(ks, func(i, j int) bool {
		return fmt.Sprint(ks[i].Interface()) < fmt.Sprint(ks[j].Interface())
	})
	return ks
}

func mapArg(name string, args []any) (reflect.Value, error) {
	if len(args) != 1 {
		return reflect.Value{}, fmt.Errorf("%s: invalid number of arguments (expected 1, got %d)", name, len(args))
	}
	v := reflect.ValueOf(args[0])
	if v.Kind() != reflect.Map {
		return reflect.Value{}, fmt.Errorf("%s: expected an object, got %T", name, args[0])
	}
	return v, nil
}

func sortedKeys(args ...any) (any, error) {
	v, err := mapArg("keys", args)
	if err != nil {
		return nil, err
	}
	ks := sortedMapKeys(v)
	out := make([]any, len(ks))
	for i, k := range ks {
		out[i] = k.Interface()
	}
	return out, nil
}

func sortedValues(args ...any) (any, error) {
	v, err := mapArg("values", args)
	if err != nil {
		return nil, err
	}
	ks := sortedMapKeys(v)
	out := make([]any, len(ks))
	for i, k := range ks {
		out[i] = v.MapIndex(k).Interface()
	}
	return out, nil
}

func sortedPairs(args ...any) (any, error) {
	v, err := mapArg("toPairs", args)
	if err != nil {
		return nil, err
	}
	ks := sortedMapKeys(v)
	out := make([]any, len(ks))
	for i, k := range ks {
		out[i] = []any{k.Interface(), v.MapIndex(k).Interface()}
	}
	return out, nil
}

// refScope is what an expression may refer to at one place in a spec.
type refScope struct {
	params map[string]bool
	steps  map[string]int
	// outer are steps an expression may read without depending on them:
	// for exit handlers, the pipeline's steps, which have all ended.
	outer map[string]bool
	// exit allows run.state, run.failedSteps and run.error (exit handlers).
	exit    bool
	self    string
	itemOK  bool
	itemWhy string // message when item is not allowed here
}

// analysis is the result of checking one expression's references.
type analysis struct {
	steps    []string // referenced steps (existing, not self), first-use order
	problems []string // deduplicated messages
	parseErr bool
}

// analyzeExpr parses src and checks every name it uses against sc. It works
// on the untyped AST so it can give domain messages ("unknown param") that
// expr's checker cannot.
func analyzeExpr(src string, sc *refScope) analysis {
	a := &analyzer{sc: sc, seenStep: map[string]bool{}, seenMsg: map[string]bool{}}
	tree, err := parser.Parse(src)
	if err != nil {
		a.problem("%s", exprErrorMessage(err, true))
		a.res.parseErr = true
		return a.res
	}
	a.walk(tree.Node)
	return a.res
}

type analyzer struct {
	sc       *refScope
	locals   []string
	res      analysis
	seenStep map[string]bool
	seenMsg  map[string]bool
}

func (a *analyzer) problem(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !a.seenMsg[msg] {
		a.seenMsg[msg] = true
		a.res.problems = append(a.res.problems, msg)
	}
}

func (a *analyzer) isLocal(name string) bool {
	for _, l := range a.locals {
		if l == name {
			return true
		}
	}
	return false
}

func (a *analyzer) walk(n ast.Node) {
	switch n := n.(type) {
	case nil:
	case *ast.IdentifierNode:
		a.ident(n.Value, nil)
	case *ast.MemberNode:
		a.member(n)
	case *ast.ChainNode:
		a.walk(n.Node)
	case *ast.UnaryNode:
		a.walk(n.Node)
	case *ast.BinaryNode:
		a.walk(n.Left)
		a.walk(n.Right)
	case *ast.SliceNode:
		a.walk(n.Node)
		a.walk(n.From)
		a.walk(n.To)
	case *ast.CallNode:
		if id, ok := n.Callee.(*ast.IdentifierNode); ok && !a.isLocal(id.Value) {
			if why, ok := disabledBuiltins[id.Value]; ok {
				a.problem("%s", why)
			} else {
				a.problem("unknown function %q", id.Value)
			}
		} else {
			a.walk(n.Callee)
		}
		for _, arg := range n.Arguments {
			a.walk(arg)
		}
	case *ast.BuiltinNode:
		if why, ok := disabledBuiltins[n.Name]; ok {
			a.problem("%s", why)
		}
		for _, arg := range n.Arguments {
			a.walk(arg)
		}
	case *ast.PredicateNode:
		a.walk(n.Node)
	case *ast.VariableDeclaratorNode:
		a.walk(n.Value)
		switch n.Name {
		case "params", "steps", "item", "run":
			a.problem("let %s would hide the built-in name %q; choose another name", n.Name, n.Name)
		}
		a.locals = append(a.locals, n.Name)
		a.walk(n.Expr)
		a.locals = a.locals[:len(a.locals)-1]
	case *ast.SequenceNode:
		for _, x := range n.Nodes {
			a.walk(x)
		}
	case *ast.ConditionalNode:
		a.walk(n.Cond)
		a.walk(n.Exp1)
		a.walk(n.Exp2)
	case *ast.ArrayNode:
		for _, x := range n.Nodes {
			a.walk(x)
		}
	case *ast.MapNode:
		for _, x := range n.Pairs {
			a.walk(x)
		}
	case *ast.PairNode:
		a.walk(n.Key)
		a.walk(n.Value)
	}
}

// member checks a chain such as steps.a.outputs.x as a whole, since the
// meaning of each property depends on the root name.
func (a *analyzer) member(n *ast.MemberNode) {
	var props []ast.Node
	var cur ast.Node = n
loop:
	for {
		switch c := cur.(type) {
		case *ast.MemberNode:
			props = append(props, c.Property)
			cur = c.Node
		case *ast.ChainNode:
			cur = c.Node
		default:
			break loop
		}
	}
	for i, j := 0, len(props)-1; i < j; i, j = i+1, j-1 {
		props[i], props[j] = props[j], props[i]
	}
	if id, ok := cur.(*ast.IdentifierNode); ok && !a.isLocal(id.Value) {
		a.ident(id.Value, props)
	} else {
		a.walk(cur)
	}
	for _, p := range props {
		if _, ok := p.(*ast.StringNode); !ok {
			a.walk(p)
		}
	}
}

func staticName(props []ast.Node, i int) (string, bool) {
	if i >= len(props) {
		return "", false
	}
	s, ok := props[i].(*ast.StringNode)
	if !ok {
		return "", false
	}
	return s.Value, true
}

func (a *analyzer) ident(name string, props []ast.Node) {
	if a.isLocal(name) {
		return
	}
	switch name {
	case "params":
		if p, ok := staticName(props, 0); ok && !a.sc.params[p] {
			msg := fmt.Sprintf("unknown param %q", p)
			if s := suggest(p, sortedKeysOf(a.sc.params)); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			a.problem("%s", msg)
		}
	case "steps":
		if len(props) == 0 {
			a.problem("refer to a step's outputs as steps.<step>.outputs, not steps alone")
			return
		}
		s, ok := staticName(props, 0)
		if !ok {
			a.problem("write the step name literally (steps.<step>.outputs) so dependencies are known before the run")
			return
		}
		switch _, exists := a.sc.steps[s]; {
		case s == a.sc.self:
			a.problem("a step cannot use its own outputs (steps.%s)", s)
		case !exists && a.sc.outer[s]:
			// Ended before this step can start: no dependency.
		case !exists:
			names := make([]string, 0, len(a.sc.steps)+len(a.sc.outer))
			for n := range a.sc.steps {
				names = append(names, n)
			}
			for n := range a.sc.outer {
				names = append(names, n)
			}
			sort.Strings(names)
			msg := fmt.Sprintf("unknown step %q", s)
			if sg := suggest(s, names); sg != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", sg)
			}
			a.problem("%s", msg)
		default:
			if !a.seenStep[s] {
				a.seenStep[s] = true
				a.res.steps = append(a.res.steps, s)
			}
		}
		if p, ok := staticName(props, 1); !ok || p != "outputs" {
			a.problem("use steps.%s.outputs.<key>: a step exposes only its outputs", s)
		}
	case "item":
		if !a.sc.itemOK {
			a.problem("%s", a.sc.itemWhy)
		}
	case "run":
		p, ok := staticName(props, 0)
		switch {
		case !ok || p == "id" || p == "project" || p == "pipeline":
		case exitRunFields[p] && a.sc.exit:
		case exitRunFields[p]:
			a.problem("run.%s is known only once the run ends: use it in onExit steps", p)
		case a.sc.exit:
			a.problem("unknown run field %q; run has id, project, pipeline, state, failedSteps and error", p)
		default:
			a.problem("unknown run field %q; run has id, project and pipeline (and, in onExit steps, state, failedSteps and error)", p)
		}
	default:
		a.problem("unknown name %q; use params.*, steps.<step>.outputs.*, item or run.*", name)
	}
}

func sortedKeysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// checkExpr analyses and compiles src; it returns the referenced steps and
// the problems, compile errors only when references were clean (an unknown
// name would otherwise be reported twice).
func checkExpr(src string, mode exprMode, sc *refScope) ([]string, []string) {
	an := analyzeExpr(src, sc)
	if len(an.problems) > 0 {
		return an.steps, an.problems
	}
	if _, err := compileExpr(src, mode); err != nil {
		return an.steps, []string{err.Error()}
	}
	return an.steps, nil
}

// segment is a piece of a templated string: literal text or an expression.
type segment struct {
	text   string
	isExpr bool
}

// splitTemplate cuts s at "{{ … }}". The closing "}}" is found by tracking
// string literals and brace depth so expressions may contain map literals and
// predicates ({{ filter(xs, {# > 1}) }}). A "}}" outside a template is
// literal text, since JSON in shell arguments often ends with "}}". Write a
// literal "{{" as {{ "{{" }}.
func splitTemplate(s string) ([]segment, error) {
	var out []segment
	for {
		start := strings.Index(s, "{{")
		if start < 0 {
			if s != "" {
				out = append(out, segment{text: s})
			}
			return out, nil
		}
		if start > 0 {
			out = append(out, segment{text: s[:start]})
		}
		end, err := templateEnd(s, start+2)
		if err != nil {
			return nil, err
		}
		body := strings.TrimSpace(s[start+2 : end])
		if body == "" {
			return nil, errors.New("empty template \"{{ }}\"")
		}
		out = append(out, segment{text: body, isExpr: true})
		s = s[end+2:]
	}
}

func templateEnd(s string, i int) (int, error) {
	depth := 0
	var quote byte
	for ; i < len(s); i++ {
		ch := s[i]
		if quote != 0 {
			if ch == '\\' && quote != '`' {
				i++
			} else if ch == quote {
				quote = 0
			}
			continue
		}
		switch ch {
		case '"', '\'', '`':
			quote = ch
		case '{':
			depth++
		case '}':
			if depth == 0 && i+1 < len(s) && s[i+1] == '}' {
				return i, nil
			}
			if depth > 0 {
				depth--
			}
		}
	}
	if quote != 0 {
		return 0, errors.New("unterminated string literal inside \"{{ }}\"")
	}
	return 0, errors.New("\"{{\" is not closed by \"}}\"")
}

// checkTemplate validates every template in s.
func checkTemplate(s string, sc *refScope) ([]string, []string) {
	segs, err := splitTemplate(s)
	if err != nil {
		return nil, []string{err.Error()}
	}
	var refs, msgs []string
	for _, sg := range segs {
		if !sg.isExpr {
			continue
		}
		r, m := checkExpr(sg.text, modeValue, sc)
		refs = append(refs, r...)
		for _, x := range m {
			msgs = append(msgs, fmt.Sprintf("in {{ %s }}: %s", sg.text, x))
		}
	}
	return refs, msgs
}
