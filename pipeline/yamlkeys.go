package pipeline

import (
	"strings"

	yamlv3 "gopkg.in/yaml.v3"
)

// yaml11Bools are the plain scalars other than true and false that YAML
// 1.1, which sigs.k8s.io/yaml implements, reads as booleans.
var yaml11Bools = map[string]string{
	"y": "true", "yes": "true", "on": "true",
	"n": "false", "no": "false", "off": "false",
}

// boolKeys reports every mapping key of a YAML document that is written
// as a plain y, n, yes, no, on or off: YAML 1.1 reads it as a boolean, so
// an output, env variable or param named n would silently be named
// "false" (or clash with another such key with a baffling "key true
// already set"). Values need no such check: a boolean where a string is
// expected is already a type error. A document yaml.v3 cannot parse is
// left to the converter's own error.
func boolKeys(data []byte, ps *problems) {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(data, &doc); err != nil {
		return
	}
	var walk func(n *yamlv3.Node, path string)
	walk = func(n *yamlv3.Node, path string) {
		switch n.Kind {
		case yamlv3.DocumentNode:
			for _, c := range n.Content {
				walk(c, path)
			}
		case yamlv3.SequenceNode:
			for i, c := range n.Content {
				walk(c, index(path, i))
			}
		case yamlv3.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k, v := n.Content[i], n.Content[i+1]
				if b, ok := yaml11Bools[strings.ToLower(k.Value)]; ok && k.Kind == yamlv3.ScalarNode && k.Style == 0 && k.Tag == "!!str" {
					ps.add(key(path, k.Value), "YAML reads the unquoted key %s as the boolean %s: quote it (%q) (line %d)", k.Value, b, k.Value, k.Line)
					continue
				}
				walk(v, key(path, k.Value))
			}
		}
	}
	walk(&doc, "")
}
