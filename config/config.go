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
	VarlenClusters    bool      // PAGEDKV_VARLEN_CLUSTERS
	VarlenWGMMA       SplitMode // PAGEDKV_VARLEN_WGMMA
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
	VarlenClusters    *bool
	VarlenWGMMA       *SplitMode
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
// Every source is parsed by one grammar per knob (see the package doc): a
// value the environment rejects, the file rejects too, as written, and the
// reverse. A knob's variable set to the empty string is an error, not unset.
//
// Every error wraps ErrInvalid. It names the variable as its source spells it
// (PAGEDKV_KV_CAPACITY, "path.yaml: kv_capacity" or Options.KVCapacity), the
// value as written and what is allowed. A config file with an extension other
// than .yaml, .yml or .toml, that cannot be read or parsed, or with a key that
// is not a knob, is an error too, and so is a variable in the environment that
// starts with PAGEDKV_ but is neither a knob's Env nor one of NonKnobEnv (the
// error names each one, and the closest known name where one is close).
func Load(opts Options) (Config, error) {
	if err := checkEnvNames(os.Environ()); err != nil {
		return Config{}, err
	}

	v := viper.New()

	var fileVals map[string]fileValue
	path, origin := configFile(opts)
	if path != "" {
		var err error
		if fileVals, err = readFile(v, path, origin); err != nil {
			return Config{}, err
		}
	}

	// The file keys are read above before anything else is registered, so
	// that AllKeys listed only what the file holds. Defaults and environment
	// bindings come now; viper's own precedence (Set > env > file > default)
	// then matches the documented one. An empty variable is set (and then
	// rejected by the grammar), never a silent fall-through to the file.
	v.SetEnvPrefix(strings.TrimSuffix(EnvPrefix, "_"))
	v.AllowEmptyEnv(true)
	for _, k := range keys {
		v.SetDefault(k.File, k.Default)
		if err := v.BindEnv(k.File, k.Env); err != nil {
			return Config{}, errorf("binding %s: %w", k.Env, err)
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
		_, envSet := os.LookupEnv(k.Env)
		switch {
		case envSet:
			raw = fmt.Sprint(v.Get(k.File))
			name, shown = k.Env, strconv.Quote(raw)
			c.Sources[k.File] = SourceEnv
		case v.InConfig(k.File):
			name = path + ": " + k.File
			fv, ok := fileVals[k.File]
			switch {
			case !ok:
				// Viper found the key where the file's own reading did not.
				return Config{}, errorf("%s: %s: the value as written cannot be found; allowed: %s", path, k.File, k.Allowed)
			case !fv.scalar:
				return Config{}, invalid(name, fmt.Sprintf("%v", v.Get(k.File)), errNotScalar, k)
			}
			raw, shown = fv.text, fv.shown
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

// readFile reads the config file at path into v and returns its values as
// written (see fileValues). A key that is not a knob, or a knob without a
// value, is an error.
func readFile(v *viper.Viper, path, origin string) (map[string]fileValue, error) {
	var typ string
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".yaml", ".yml":
		typ = "yaml"
	case ".toml":
		typ = "toml"
	default:
		return nil, errorf("%s=%q has extension %q; allowed: .yaml, .yml, .toml", origin, path, ext)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, errorf("reading %s=%q: %w", origin, path, err)
	}
	v.SetConfigType(typ)
	if err := v.ReadConfig(bytes.NewReader(data)); err != nil {
		return nil, errorf("parsing %s=%q as %s: %w", origin, path, typ, err)
	}
	vals, err := fileValues(typ, data)
	if err != nil {
		return nil, errorf("parsing %s=%q as %s: %w", origin, path, typ, err)
	}
	// Viper lists neither a key whose value is an empty mapping nor one
	// with a null value; the file's own top-level keys fill the gap.
	fileKeys := v.AllKeys()
	for fk := range vals {
		fileKeys = append(fileKeys, fk)
	}
	slices.Sort(fileKeys)
	fileKeys = slices.Compact(fileKeys)
	for _, fk := range fileKeys {
		k, ok := lookupKey(fk)
		if !ok {
			return nil, errorf("%s: unknown key %q; known keys: %s", path, fk, knownFileKeys())
		}
		if !v.InConfig(fk) || vals[fk].null {
			return nil, errorf("%s: %s has no value; allowed: %s", path, fk, k.Allowed)
		}
	}
	return vals, nil
}

func showOption(v any) string {
	if m, ok := v.(SplitMode); ok {
		return strconv.Quote(string(m))
	}
	return fmt.Sprint(v)
}

// invalid is the error for a value that the knob k's grammar or range
// rejects: "config: NAME=VALUE reason; allowed: ...".
func invalid(name, shown string, reason error, k key) error {
	return errorf("%s=%s %v; allowed: %s", name, shown, reason, k.Allowed)
}
