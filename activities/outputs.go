package activities

// JSONKind names the JSON value that starts with first, for messages such
// as "outputs must be a JSON object, not an array". Both runtimes use it so
// a step author reads the same words wherever the step ran.
func JSONKind(first byte) string {
	switch first {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	default:
		return "a number"
	}
}
