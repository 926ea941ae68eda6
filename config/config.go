package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/viper"
)

// Config is the resolved set of knobs. The zero value is not meaningful; use
// Load or Default.
type Config struct {
	KVCapacity        int       // PAGEDKV_KV_CAPACITY, 1..1<<24
	PagedFlashSplits  int       // PAGEDKV_PAGED_FLASH_SPLITS, 0 = auto, else 1..MaxPagedFlashSplits
	PagedFlash        bool      // PAGEDKV_PAGED_FLASH
	SplitKAttn        SplitMode // PAGEDKV_SPLIT_K_ATTN
	ScratchLimitBytes int64     // PAGEDKV_SCRATCH_LIMIT_BYTES, 0 = no limit
	CheckBounds       bool      // PAGEDKV_CHECK_BOUNDS
	DecodeClusters    bool      // PAGEDKV_DECODE_CLUSTERS
	DecodeNarrow      bool      // PAGEDKV_DECODE_NARROW
	DecodeBalance     SplitMode // PAGEDKV_DECODE_BALANCE
	LoadSASS          SplitMode // PAGEDKV_LOAD_SASS

	// Sources maps every file key (kv_capacity, …) to where its value came from.
	Sources map[string]Source
}

// Options sets knobs explicitly; a nil field is not set. Explicit options take
// precedence over the environment, the config file and the defaults, and are
// validated like every other source.
type Options struct {
	KVCapacity        *int
	PagedFlashSplits  *int // 0 = auto
	PagedFlash        *bool
	SplitKAttn        *SplitMode
	ScratchLimitBytes *int64
	CheckBounds       *bool
	DecodeClusters    *bool
	DecodeNarrow      *bool
	DecodeBalance     *SplitMode
	LoadSASS          *SplitMode

	// ConfigFile, when not nil, replaces PAGEDKV_CONFIG; a pointer to "" means
	// no config file even if PAGEDKV_CONFIG is set.
	ConfigFile *string
}

// Source says where a knob's value came from: "default", "env", "option", or
// "file <path>".
type Source string

// The sources other than a file; see FileSource.
const (
	SourceDefault Source = "default"
	SourceEnv     Source = "env"
	SourceOption  Source = "option"
)

// FileSource is the Source of a value read from the config file at path.
func FileSource(path string) Source { return Source("file " + path) }

// IsFile reports whether the value came from a config file.
func (s Source) IsFile() bool { return strings.HasPrefix(string(s), "file ") }

// Source returns where the value of the knob with the given file key came
// from, or "" for an unknown key.
func (c Config) Source(fileKey string) Source { return c.Sources[fileKey] }

// Value returns the knob with the given file key as the environment would
// spell it (PagedFlashSplits 0 is "auto"), and false for an unknown key.
func (c Config) Value(fileKey string) (string, bool) {
	k, ok := lookupKey(fileKey)
	if !ok {
		return "", false
	}
	return k.get(c), true
}

// Table returns the resolved knobs as rows of text, header first:
// environment variable, value, source, allowed values.
func (c Config) Table() [][]string {
	rows := [][]string{{"ENV", "VALUE", "SOURCE", "ALLOWED"}}
	for _, k := range keys {
		rows = append(rows, []string{k.Env, k.get(c), string(c.Sources[k.File]), k.Allowed})
	}
	return rows
}

// Default returns the built-in defaults, every Source "default".
func Default() Config {
	c := Config{Sources: make(map[string]Source, len(keys))}
	for _, k := range keys {
		v, err := k.parse(k.Default)
		if err != nil {
			panic(fmt.Sprintf("config: default of %s: %q %v", k.Env, k.Default, err))
		}
		k.set(&c, v)
		c.Sources[k.File] = SourceDefault
	}
	return c
}

// Load resolves every knob from opts, the process environment, the config file
// (Options.ConfigFile, else PAGEDKV_CONFIG) and the defaults, in that order of
// precedence. It reads the environment and the file on every call.
//
// An error names the variable as its source spells it (PAGEDKV_KV_CAPACITY,
// "path.yaml: kv_capacity" or Options.KVCapacity), the value and what is
// allowed. A config file with an extension other than .yaml, .yml or .toml,
// or with a key that is not a knob, is an error too, and so is a variable
// in the environment that starts with PAGEDKV_ but is neither a knob's Env
// nor one of NonKnobEnv (the error names each one, and the closest known
// name where one is close).
func Load(opts Options) (Config, error) {
	if err := checkEnvNames(os.Environ()); err != nil {
		return Config{}, err
	}

	v := viper.New()

	path, origin := configFile(opts)
	if path != "" {
		if err := readFile(v, path, origin); err != nil {
			return Config{}, err
		}
	}

	// The file keys are read above before anything else is registered, so
	// that AllKeys listed only what the file holds. Defaults and environment
	// bindings come now; viper's own precedence (Set > env > file > default)
	// then matches the documented one.
	v.SetEnvPrefix(strings.TrimSuffix(EnvPrefix, "_"))
	for _, k := range keys {
		v.SetDefault(k.File, k.Default)
		if err := v.BindEnv(k.File, k.Env); err != nil {
			return Config{}, fmt.Errorf("config: binding %s: %w", k.Env, err)
		}
	}

	c := Config{Sources: make(map[string]Source, len(keys))}
	for _, k := range keys {
		if opt, ok := k.option(opts); ok {
			val, err := k.validate(opt)
			if err != nil {
				return Config{}, invalid("Options."+k.Field, showOption(opt), err, k)
			}
			v.Set(k.File, val)
			k.set(&c, val)
			c.Sources[k.File] = SourceOption
			continue
		}

		var name, shown, raw string
		envVal, envSet := os.LookupEnv(k.Env)
		switch {
		case envSet && envVal == "" && k.File == KeyPagedFlashSplits:
			// The one key where an empty variable is a value ("auto") rather
			// than unset; viper treats empty variables as unset, so it is
			// handled here.
			name, raw, shown = k.Env, "", `""`
			c.Sources[k.File] = SourceEnv
		case envSet && envVal != "":
			raw = fmt.Sprint(v.Get(k.File))
			name, shown = k.Env, strconv.Quote(raw)
			c.Sources[k.File] = SourceEnv
		case v.InConfig(k.File):
			var err error
			raw, shown, err = fileText(v.Get(k.File))
			if err != nil {
				return Config{}, invalid(path+": "+k.File, shown, err, k)
			}
			name = path + ": " + k.File
			c.Sources[k.File] = FileSource(path)
		default:
			raw = fmt.Sprint(v.Get(k.File))
			name, shown = "default "+k.Field, strconv.Quote(raw)
			c.Sources[k.File] = SourceDefault
		}
		val, err := k.parse(raw)
		if err != nil {
			return Config{}, invalid(name, shown, err, k)
		}
		k.set(&c, val)
	}
	return c, nil
}

// configFile returns the config file path and the name of what set it.
func configFile(opts Options) (path, origin string) {
	if opts.ConfigFile != nil {
		return *opts.ConfigFile, "Options.ConfigFile"
	}
	return os.Getenv(EnvConfigFile), EnvConfigFile
}

func readFile(v *viper.Viper, path, origin string) error {
	var typ string
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
		typ = "yaml"
	case ".toml":
		typ = "toml"
	default:
		return fmt.Errorf("config: %s=%q has extension %q; allowed: .yaml, .yml, .toml", origin, path, ext)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: reading %s=%q: %w", origin, path, err)
	}
	v.SetConfigType(typ)
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return fmt.Errorf("config: parsing %s=%q as %s: %w", origin, path, typ, err)
	}
	fileKeys := v.AllKeys()
	slices.Sort(fileKeys)
	for _, fk := range fileKeys {
		k, ok := lookupKey(fk)
		if !ok {
			return fmt.Errorf("config: %s: unknown key %q; known keys: %s", path, fk, knownFileKeys())
		}
		if !v.InConfig(fk) {
			return fmt.Errorf("config: %s: %s has no value; allowed: %s", path, fk, k.Allowed)
		}
	}
	return nil
}

// fileText turns a value decoded from YAML or TOML into the text the parsers
// take, and the text an error message shows (strings quoted, numbers and
// booleans not). Anything other than a scalar is rejected.
func fileText(v any) (raw, shown string, err error) {
	switch x := v.(type) {
	case string:
		return x, strconv.Quote(x), nil
	case bool:
		s := strconv.FormatBool(x)
		return s, s, nil
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		s := fmt.Sprint(x)
		return s, s, nil
	case float32, float64:
		// Not an integer as far as the parsers go, even when integral: only
		// plain integers are accepted.
		s := fmt.Sprint(x)
		return s, s, nil
	default:
		return "", fmt.Sprintf("%v", x), valueError("is not a scalar")
	}
}

func showOption(v any) string {
	if m, ok := v.(SplitMode); ok {
		return strconv.Quote(string(m))
	}
	return fmt.Sprint(v)
}

func invalid(name, shown string, reason error, k key) error {
	return fmt.Errorf("config: %s=%s %v; allowed: %s", name, shown, reason, k.Allowed)
}
