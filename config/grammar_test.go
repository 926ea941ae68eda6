package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// textSource is one way a knob's value text reaches Load.
type textSource int

const (
	srcEnv        textSource = iota // PAGEDKV_X=text
	srcYAMLQuoted                   // x: "text" (escaped)
	srcYAMLPlain                    // x: text
	srcTOMLQuoted                   // x = "text" (escaped)
	srcTOMLBare                     // x = text
	srcOption                       // Options.X = SplitMode(text), for the mode knobs only
)

func (s textSource) String() string {
	return [...]string{"env", "yaml quoted", "yaml plain", "toml quoted", "toml bare", "option"}[s]
}

// modeOptions sets a SplitMode knob in Options by file key: the one kind of
// knob whose Options field carries text.
var modeOptions = map[string]func(m SplitMode) Options{
	KeySplitKAttn:    func(m SplitMode) Options { return Options{SplitKAttn: &m} },
	KeyDecodeBalance: func(m SplitMode) Options { return Options{DecodeBalance: &m} },
	KeyLoadSASS:      func(m SplitMode) Options { return Options{LoadSASS: &m} },
}

// loadText loads the knob k set to text through src, with nothing else set.
func loadText(t *testing.T, src textSource, k Key, text string) (Config, error) {
	t.Helper()
	clearEnv(t)
	noFile := ""
	file := func(name, body string) (Config, error) {
		path := writeFile(t, name, body)
		return Load(Options{ConfigFile: &path})
	}
	switch src {
	case srcEnv:
		t.Setenv(k.Env, text)
		return Load(Options{ConfigFile: &noFile})
	case srcYAMLQuoted:
		return file("c.yaml", k.File+": "+quoteText(text)+"\n")
	case srcYAMLPlain:
		return file("c.yaml", k.File+": "+text+"\n")
	case srcTOMLQuoted:
		return file("c.toml", k.File+" = "+quoteText(text)+"\n")
	case srcTOMLBare:
		return file("c.toml", k.File+" = "+text+"\n")
	case srcOption:
		opts := modeOptions[k.File](SplitMode(text))
		opts.ConfigFile = &noFile
		return Load(opts)
	}
	panic(fmt.Sprintf("unknown source %d", src))
}

// quoteText writes s as a double-quoted string that YAML and TOML both read
// back as s: quotes and backslashes escaped, everything outside printable
// ASCII as \uXXXX or \UXXXXXXXX (invalid UTF-8 reads back as U+FFFD).
func quoteText(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r >= 0x20 && r < 0x7f:
			b.WriteRune(r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			fmt.Fprintf(&b, `\U%08X`, r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func keyByFile(t *testing.T, file string) Key {
	t.Helper()
	for _, k := range Keys() {
		if k.File == file {
			return k
		}
	}
	t.Fatalf("no knob %q", file)
	return Key{}
}

// TestGrammarSameForEverySource holds each rule of the grammar (see the
// package doc) for every source that can carry the text: the same value, or
// the same reason for refusing it.
func TestGrammarSameForEverySource(t *testing.T) {
	quoted := []textSource{srcEnv, srcYAMLQuoted, srcTOMLQuoted}
	plain := slices.Concat(quoted, []textSource{srcYAMLPlain}) // texts YAML also reads as plain scalars
	bare := slices.Concat(plain, []textSource{srcTOMLBare})    // texts TOML also reads bare (numbers, lower-case booleans)
	option := func(srcs []textSource) []textSource { return slices.Concat(srcs, []textSource{srcOption}) }
	tests := []struct {
		rule, knob, text string
		sources          []textSource
		want             string // Config.Value on success; "" when the text is refused
		reason           string // the refusal's reason
	}{
		{"integer", KeyKVCapacity, "4096", bare, "4096", ""},
		{"integer zero", KeyScratchLimitBytes, "0", bare, "0", ""},
		{"integer max int64", KeyScratchLimitBytes, "9223372036854775807", bare, "9223372036854775807", ""},
		{"integer as string", KeyKVCapacity, "4096", quoted, "4096", ""},
		{"no plus sign", KeyKVCapacity, "+5", bare, "", string(errNotPlainInteger)},
		{"no leading zero", KeyKVCapacity, "007", plain, "", string(errNotPlainInteger)},
		{"no octal reading", KeyKVCapacity, "010", plain, "", string(errNotPlainInteger)},
		{"no negative zero", KeyScratchLimitBytes, "-0", bare, "", string(errNotPlainInteger)},
		{"no exponent", KeyKVCapacity, "5e2", bare, "", string(errNotInteger)},
		{"no exponent 1e3", KeyKVCapacity, "1e3", bare, "", string(errNotInteger)},
		{"no integral float", KeyKVCapacity, "512.0", bare, "", string(errNotInteger)},
		{"no fraction", KeyKVCapacity, "1.5", bare, "", string(errNotInteger)},
		{"no hexadecimal", KeyKVCapacity, "0x10", bare, "", string(errNotInteger)},
		{"no octal prefix", KeyKVCapacity, "0o17", bare, "", string(errNotInteger)},
		{"no binary prefix", KeyKVCapacity, "0b101", bare, "", string(errNotInteger)},
		{"no digit separator", KeyKVCapacity, "1_000", bare, "", string(errNotInteger)},
		{"no infinity", KeyKVCapacity, ".inf", plain, "", string(errNotInteger)},
		{"no unit", KeyScratchLimitBytes, "1GiB", plain, "", string(errNotInteger)},
		{"no boolean for an integer", KeyKVCapacity, "true", bare, "", string(errNotInteger)},
		{"no leading space", KeyKVCapacity, " 5", quoted, "", string(errNotInteger)},
		{"no trailing space", KeyKVCapacity, "5 ", quoted, "", string(errNotInteger)},
		{"no trailing newline", KeyKVCapacity, "5\n", quoted, "", string(errNotInteger)},
		{"integer empty", KeyKVCapacity, "", quoted, "", string(errEmpty)},
		{"negative out of range", KeyScratchLimitBytes, "-1", bare, "", string(errOutOfRange)},
		{"huge out of range", KeyScratchLimitBytes, "99999999999999999999", plain, "", string(errOutOfRange)},
		{"huge negative out of range", KeyScratchLimitBytes, "-99999999999999999999", plain, "", string(errOutOfRange)},
		{"capacity above max", KeyKVCapacity, "16777217", bare, "", string(errOutOfRange)},

		{"boolean true", KeyCheckBounds, "true", bare, "true", ""},
		{"boolean TRUE", KeyCheckBounds, "TRUE", plain, "true", ""},
		{"boolean On", KeyCheckBounds, "On", plain, "true", ""},
		{"boolean 1", KeyCheckBounds, "1", bare, "true", ""},
		{"boolean off", KeyPagedFlash, "off", plain, "false", ""},
		{"boolean 0", KeyPagedFlash, "0", bare, "false", ""},
		{"no yes", KeyCheckBounds, "yes", plain, "", string(errNotBool)},
		{"no 2", KeyCheckBounds, "2", bare, "", string(errNotBool)},
		{"no 01", KeyCheckBounds, "01", plain, "", string(errNotBool)},
		{"no +1", KeyCheckBounds, "+1", bare, "", string(errNotBool)},
		{"no 1.0", KeyCheckBounds, "1.0", bare, "", string(errNotBool)},
		{"no 0x1", KeyCheckBounds, "0x1", bare, "", string(errNotBool)},
		{"boolean no space", KeyCheckBounds, " on", quoted, "", string(errNotBool)},
		{"boolean empty", KeyCheckBounds, "", quoted, "", string(errEmpty)},

		{"mode auto", KeyLoadSASS, "auto", option(plain), "auto", ""},
		{"mode AUTO", KeyLoadSASS, "AUTO", option(plain), "auto", ""},
		{"mode On", KeyDecodeBalance, "On", option(plain), "1", ""},
		{"mode true", KeySplitKAttn, "true", option(bare), "1", ""},
		{"mode 0", KeySplitKAttn, "0", option(bare), "0", ""},
		{"mode no 2", KeySplitKAttn, "2", option(bare), "", string(errNotAllowed)},
		{"mode no automatic", KeySplitKAttn, "automatic", option(plain), "", string(errNotAllowed)},
		{"mode empty", KeyDecodeBalance, "", option(quoted), "", string(errEmpty)},

		{"splits auto", KeyPagedFlashSplits, "AUTO", plain, "auto", ""},
		{"splits count", KeyPagedFlashSplits, "64", bare, "64", ""},
		{"splits no 0", KeyPagedFlashSplits, "0", bare, "", string(errOutOfRange)},
		{"splits no leading zero", KeyPagedFlashSplits, "08", plain, "", string(errNotPlainInteger)},
		{"splits no float", KeyPagedFlashSplits, "8.0", bare, "", string(errNotInteger)},
		{"splits empty", KeyPagedFlashSplits, "", quoted, "", string(errEmpty)},
	}
	for _, tt := range tests {
		k := keyByFile(t, tt.knob)
		for _, src := range tt.sources {
			t.Run(tt.rule+"/"+src.String(), func(t *testing.T) {
				c, err := loadText(t, src, k, tt.text)
				if tt.want != "" {
					require.NoError(t, err)
					got, _ := c.Value(k.File)
					assert.Equal(t, tt.want, got)
					return
				}
				require.ErrorIs(t, err, ErrInvalid)
				assert.Contains(t, err.Error(), " "+tt.reason+"; allowed: "+k.Allowed)
			})
		}
	}
}

// TestFileValuesAsWritten shows file values in error messages as the file
// writes them, not as YAML or TOML decode them.
func TestFileValuesAsWritten(t *testing.T) {
	tests := []struct {
		name, body string
		want       string // with PATH standing for the file's path
	}{
		{"c.yaml", "kv_capacity: 5e2\n", `config: PATH: kv_capacity=5e2 is not an integer; allowed: 1..16777216`},
		{"c.yaml", "kv_capacity: 512.0\n", `config: PATH: kv_capacity=512.0 is not an integer; allowed: 1..16777216`},
		{"c.yaml", "kv_capacity: 010\n", `config: PATH: kv_capacity=010 is not a plain integer (no "+" sign, leading zero or -0); allowed: 1..16777216`},
		{"c.yaml", "kv_capacity: '1e3'\n", `config: PATH: kv_capacity="1e3" is not an integer; allowed: 1..16777216`},
		{"c.yaml", "kv_capacity: \"\"\n", `config: PATH: kv_capacity="" is empty; allowed: 1..16777216`},
		{"c.yaml", "check_bounds: yes\n", `config: PATH: check_bounds="yes" is not a boolean; allowed: 1, 0, true, false, on, off (any case)`},
		{"c.toml", "kv_capacity = 1_000\n", `config: PATH: kv_capacity=1_000 is not an integer; allowed: 1..16777216`},
		{"c.toml", "kv_capacity = +5\n", `config: PATH: kv_capacity=+5 is not a plain integer (no "+" sign, leading zero or -0); allowed: 1..16777216`},
		{"c.toml", "kv_capacity = 0x10\n", `config: PATH: kv_capacity=0x10 is not an integer; allowed: 1..16777216`},
		{"c.toml", "kv_capacity = 1979-05-27\n", `config: PATH: kv_capacity=1979-05-27 is not an integer; allowed: 1..16777216`},
		{"c.toml", "kv_capacity = '''\n5\n'''\n", `config: PATH: kv_capacity="5\n" is not an integer; allowed: 1..16777216`},
	}
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.body, func(t *testing.T) {
			clearEnv(t)
			path := writeFile(t, tt.name, tt.body)
			_, err := Load(Options{ConfigFile: &path})
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, strings.ReplaceAll(tt.want, "PATH", path), err.Error())
		})
	}
}

// TestFileShapes covers file shapes that viper would read without a word
// about what it drops.
func TestFileShapes(t *testing.T) {
	tests := []struct {
		name, body string
		want       string // a part of the error; "" for none
	}{
		{"c.yaml", "kv_capacity: 1\nKV_CAPACITY: 2\n", `key "kv_capacity" is given twice`},
		{"c.toml", "kv_capacity = 1\nKV_CAPACITY = 2\n", `key "kv_capacity" is given twice`},
		{"c.yaml", "base: &b {kv_capacity: 5}\n<<: *b\n", "merge keys (<<) are not supported"},
		{"c.yaml", "kv_capacity: 5\n---\nkv_capacity: 6\n", "a second YAML document"},
		{"c.yaml", "foo: {}\n", `unknown key "foo"`},
		{"c.toml", "foo = {}\n", `unknown key "foo"`},
		{"c.yaml", "kv_capacity: {}\n", "kv_capacity=map[] is not a scalar"},
		{"c.toml", "kv_capacity = []\n", "kv_capacity=[] is not a scalar"},
		{"c.yaml", "kv_capacity: [\n", "parsing Options.ConfigFile="},
		{"c.toml", "kv_capacity = \n", "parsing Options.ConfigFile="},
		{"c.yaml", "5\n", "parsing Options.ConfigFile="},
		{"c.yaml", "a: &x 64\nkv_capacity: *x\n", `unknown key "a"`},
		{"c.yaml", "kv_capacity: 64 # a comment\n", ""},
		{"c.yaml", "KV_Capacity: 64\n", ""},
		{"c.yaml", "", ""},
		{"c.toml", "# only a comment\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.body, func(t *testing.T) {
			clearEnv(t)
			path := writeFile(t, tt.name, tt.body)
			_, err := Load(Options{ConfigFile: &path})
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestEveryErrorIsInvalid checks that each kind of error Load returns wraps
// ErrInvalid.
func TestEveryErrorIsInvalid(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		env  map[string]string
		opts Options
	}{
		{"bad env value", map[string]string{"PAGEDKV_KV_CAPACITY": "x"}, Options{}},
		{"empty env value", map[string]string{"PAGEDKV_CHECK_BOUNDS": ""}, Options{}},
		{"unknown env name", map[string]string{"PAGEDKV_NOPE": "1"}, Options{}},
		{"bad option", nil, Options{KVCapacity: ptr(0)}},
		{"bad extension", nil, Options{ConfigFile: ptr(dir + "/c.json")}},
		{"unreadable file", nil, Options{ConfigFile: ptr(dir)}},
		{"missing file", nil, Options{ConfigFile: ptr(dir + "/absent.toml")}},
		{"unknown file key", nil, Options{ConfigFile: ptr(writeFile(t, "u.yaml", "nope: 1\n"))}},
		{"bad file value", nil, Options{ConfigFile: ptr(writeFile(t, "b.toml", "kv_capacity = 5e2\n"))}},
		{"file syntax", nil, Options{ConfigFile: ptr(writeFile(t, "s.toml", "kv_capacity = = 5\n"))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for name, value := range tt.env {
				t.Setenv(name, value)
			}
			_, err := Load(tt.opts)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.True(t, strings.HasPrefix(err.Error(), "config: "), err.Error())
			assert.NotContains(t, err.Error(), ErrInvalid.Error(), "the sentinel's text is not repeated")
		})
	}
}
