package config

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
	"go.yaml.in/yaml/v3"
)

// fileValue is one top-level value of a config file as the file writes it.
// Viper decodes YAML and TOML into Go values, which loses the spelling: YAML
// reads 5e2 and 512.0 as floats, 010 as octal 8 and 0x10 as 16, TOML reads
// +5 and 1_000 as integers. The knobs' grammar is defined on text, so the
// file's values are taken as written and parsed exactly like environment
// variables.
type fileValue struct {
	text   string // a string's content, or any other scalar's source text
	shown  string // text as error messages show it: strings quoted, other scalars as written
	scalar bool   // false for YAML sequences and mappings, TOML arrays and tables
	null   bool   // a YAML null: ~, null, or nothing after the colon
}

// fileValues returns the top-level values of a config file of type typ
// ("yaml" or "toml") by key in lower case, as viper names them. Keys that
// differ only in case are an error: viper would keep one of them silently.
// Values under a TOML table or a YAML mapping are left out: no knob lives
// there, and viper's key listing reports them as unknown keys.
func fileValues(typ string, data []byte) (map[string]fileValue, error) {
	if typ == "toml" {
		return tomlValues(data)
	}
	return yamlValues(data)
}

func yamlValues(data []byte) (map[string]fileValue, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, next yaml.Node
	if err := dec.Decode(&doc); err != nil && err != io.EOF {
		return nil, err
	}
	// Viper reads the first document only; keys in a second one would be
	// ignored without a word.
	if err := dec.Decode(&next); err != io.EOF {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("line %d: a second YAML document; a config file holds one", next.Line)
	}
	values := map[string]fileValue{}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return values, nil // an empty file
	}
	root := yamlTarget(doc.Content[0])
	if root.Kind != yaml.MappingNode {
		return values, nil // viper has already refused a document that is not a mapping
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := yamlTarget(root.Content[i]), yamlTarget(root.Content[i+1])
		if k.ShortTag() == "!!merge" {
			return nil, fmt.Errorf("line %d: merge keys (<<) are not supported; write each key", k.Line)
		}
		if err := addValue(values, k.Value, yamlValue(v)); err != nil {
			return nil, err
		}
	}
	return values, nil
}

// yamlTarget follows an alias to the node it names.
func yamlTarget(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func yamlValue(n *yaml.Node) fileValue {
	if n.Kind != yaml.ScalarNode {
		return fileValue{}
	}
	switch n.ShortTag() {
	case "!!null":
		return fileValue{scalar: true, null: true}
	case "!!int", "!!float", "!!bool":
		return fileValue{text: n.Value, shown: n.Value, scalar: true}
	default:
		return fileValue{text: n.Value, shown: strconv.Quote(n.Value), scalar: true}
	}
}

func tomlValues(data []byte) (map[string]fileValue, error) {
	values := map[string]fileValue{}
	var p unstable.Parser
	p.Reset(data)
	topLevel := true
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			topLevel = false // every key/value after a table header belongs to that table
		case unstable.KeyValue:
			key := e.Key()
			if !topLevel || !key.Next() || !key.IsLast() {
				continue // nested, or a dotted key: not a knob
			}
			if err := addValue(values, string(key.Node().Data), tomlValue(e.Value())); err != nil {
				return nil, err
			}
		}
	}
	if err := p.Error(); err != nil {
		return nil, err
	}
	return values, nil
}

func tomlValue(n *unstable.Node) fileValue {
	switch n.Kind {
	case unstable.Array, unstable.InlineTable:
		return fileValue{}
	case unstable.String:
		s := string(n.Data)
		return fileValue{text: s, shown: strconv.Quote(s), scalar: true}
	default: // booleans, integers, floats, dates and times: their source text
		s := string(n.Data)
		return fileValue{text: s, shown: s, scalar: true}
	}
}

func addValue(values map[string]fileValue, key string, v fileValue) error {
	lower := strings.ToLower(key)
	if _, ok := values[lower]; ok {
		return fmt.Errorf("key %q is given twice (keys are not case-sensitive)", lower)
	}
	values[lower] = v
	return nil
}
