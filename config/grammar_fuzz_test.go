package config

import (
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// FuzzConfigSources sets a random knob to a random text once through the
// environment and once through each other source that can carry the text
// unchanged, and checks that they agree: all refuse it (with errors that
// wrap ErrInvalid) or all give the same Config.
func FuzzConfigSources(f *testing.F) {
	seeds := []string{
		// Values the file once accepted and the environment refused.
		"512.0", "5e2", "1e3",
		"", " ", "\t", " 5", "5 ", "5\n", "+5", "007", "010", "-0", "-1", "0", "1", "64", "65",
		"99999999999999999999", "-99999999999999999999", "9223372036854775807", "9223372036854775808",
		"0x10", "0o7", "0b1", "1_000", ".inf", ".nan", "inf", "nan", "1.0", "01",
		"true", "TRUE", "True", "false", "on", "On", "OFF", "yes", "no", "y",
		"auto", "AUTO", "Auto", "automatic",
		"null", "~", "1979-05-27", "1979-05-27 07:32:00", "[1]", "{}", "a: b", "#", "1 # c",
		`"5"`, "'5'", "\"\"\"5\"\"\"", "5\x00", "\xff", "é", "\u2028",
	}
	// One knob of each grammar seeds the corpus; the fuzzer varies the knob.
	for i, k := range Keys() {
		switch k.File {
		case KeyKVCapacity, KeyScratchLimitBytes, KeyPagedFlashSplits, KeyPagedFlash, KeySplitKAttn:
			for _, s := range seeds {
				f.Add(uint8(i), s)
			}
		}
	}
	f.Fuzz(func(t *testing.T, knob uint8, text string) {
		if strings.ContainsRune(text, 0) {
			t.Skip("an environment variable cannot hold NUL")
		}
		k := Keys()[int(knob)%len(Keys())]
		envC, envErr := loadText(t, srcEnv, k, text)
		if envErr != nil {
			require.ErrorIs(t, envErr, ErrInvalid)
		}
		agree := func(src textSource) {
			t.Helper()
			c, err := loadText(t, src, k, text)
			if envErr != nil {
				require.Error(t, err, "%s accepts %s=%q, the environment refuses it: %v", src, k.File, text, envErr)
				require.ErrorIs(t, err, ErrInvalid)
				return
			}
			require.NoError(t, err, "%s refuses %s=%q, the environment accepts it", src, k.File, text)
			c.Sources, envC.Sources = nil, nil
			assert.Equal(t, envC, c, "%s and the environment read %s=%q differently", src, k.File, text)
		}
		// Strings: quoted, the file carries any text.
		agree(srcYAMLQuoted)
		agree(srcTOMLQuoted)
		if _, ok := modeOptions[k.File]; ok {
			agree(srcOption)
		}
		// Unquoted: the same text, where YAML or TOML reads it back as
		// written. Elsewhere (a comment, a flow mapping, a TOML string) the
		// file says something else, and only ErrInvalid is checked.
		for _, src := range []textSource{srcYAMLPlain, srcTOMLBare} {
			faithful := src == srcYAMLPlain && yamlPlainAsWritten(text) ||
				src == srcTOMLBare && tomlBareAsWritten(text)
			if faithful {
				agree(src)
				continue
			}
			if _, err := loadText(t, src, k, text); err != nil {
				require.ErrorIs(t, err, ErrInvalid)
			}
		}
	})
}

// yamlPlainAsWritten reports whether "x: text" is a one-key mapping whose
// value is the plain scalar text.
func yamlPlainAsWritten(text string) bool {
	var doc yaml.Node
	if yaml.Unmarshal([]byte("x: "+text+"\n"), &doc) != nil || len(doc.Content) != 1 {
		return false
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode || len(m.Content) != 2 {
		return false
	}
	v := m.Content[1]
	return v.Kind == yaml.ScalarNode && v.Style == 0 && v.Value == text
}

// tomlBareAsWritten reports whether "x = text" is one key whose value is not
// a string and spans the whole text: TOML then keeps the value's source text.
func tomlBareAsWritten(text string) bool {
	if text == "" || strings.ContainsAny(text, "#\"'\r\n") || strings.TrimSpace(text) != text {
		return false
	}
	var m map[string]any
	if toml.Unmarshal([]byte("x = "+text+"\n"), &m) != nil || len(m) != 1 {
		return false
	}
	_, isString := m["x"].(string)
	return !isString
}
