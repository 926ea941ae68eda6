package config

import (
	"fmt"
	"strconv"
	"strings"
)

// EnvPrefix is the prefix shared by every environment variable this package reads.
const EnvPrefix = "PAGEDKV_"

// EnvConfigFile names the environment variable that points at an optional
// config file (.yaml, .yml or .toml).
const EnvConfigFile = EnvPrefix + "CONFIG"

// EnvTestSeed names the environment variable that seeds the random inputs of
// the GPU tests in tests/. Load does not read it, but accepts it; see
// NonKnobEnv.
const EnvTestSeed = EnvPrefix + "TEST_SEED"

// File keys, one per knob. They are also the keys of Config.Sources.
const (
	KeyKVCapacity        = "kv_capacity"
	KeyPagedFlashSplits  = "paged_flash_splits"
	KeyPagedFlash        = "paged_flash"
	KeySplitKAttn        = "split_k_attn"
	KeyScratchLimitBytes = "scratch_limit_bytes"
	KeyCheckBounds       = "check_bounds"
	KeyDecodeClusters    = "decode_clusters"
	KeyVarlenClusters    = "varlen_clusters"
	KeyVarlenWGMMA       = "varlen_wgmma"
	KeyDecodeNarrow      = "decode_narrow"
	KeyDecodeBalance     = "decode_balance"
	KeyLoadSASS          = "load_sass"
)

// Limits of the integer knobs.
const (
	MaxKVCapacity = 1 << 24

	// MaxPagedFlashSplits is the largest split count the planner runs, so
	// the largest count PAGEDKV_PAGED_FLASH_SPLITS accepts. It must equal
	// dispatch.MaxSplits (the decode kernel's kMaxSplits); config does not
	// import dispatch, so a test outside this package checks that they agree.
	MaxPagedFlashSplits = 64
)

// SplitMode is a knob of three values: auto, off and on. For the split
// knobs it selects whether attention may use the split-K kernels (for
// LOAD_SASS, which machine code modules load; see its Description). It
// mirrors dispatch.SplitMode, the planner's mode, spelled as users write it
// (config does not import dispatch): SplitAuto, SplitOff and SplitOn map to
// the dispatch modes of the same names (TestSplitModesMirror in the root
// package checks it); a mode added here needs one there.
type SplitMode string

// The allowed SplitMode values. The environment, the config file and Options
// also accept "auto" in any case and every spelling of a boolean knob (1, 0,
// true, false, on, off, any case); Load turns them into these three.
const (
	SplitAuto SplitMode = "auto" // the planner decides
	SplitOff  SplitMode = "0"    // always the single-pass kernel
	SplitOn   SplitMode = "1"    // split-K whenever the planner finds more than one split useful
)

// String returns the mode as the environment spells it.
func (m SplitMode) String() string { return string(m) }

// Valid reports whether m is one of SplitAuto, SplitOff, SplitOn: the
// spellings Config holds. Load accepts more (see SplitAuto) and turns them
// into these.
func (m SplitMode) Valid() bool { return m == SplitAuto || m == SplitOff || m == SplitOn }

// Key describes one knob. Keys returns the full list; the CLI's info command
// and the README print it. Allowed holds for every source alike: the
// environment, the config file (values as written) and Options. The empty
// string is never allowed: PAGEDKV_X= is an error, not an unset knob.
type Key struct {
	Env         string // environment variable, e.g. PAGEDKV_KV_CAPACITY
	File        string // config-file key, e.g. kv_capacity
	Field       string // Config and Options field, e.g. KVCapacity
	Default     string // the default as the environment would spell it
	Allowed     string // the allowed values, as error messages print them
	Description string // one sentence
}

// key is a Key plus the functions that move its value in and out of Config.
type key struct {
	Key
	// parse turns a textual value (env or file) into the Go value; the error
	// text completes "config: NAME=VALUE ...".
	parse func(s string) (any, error)
	// option returns the value of the Options field and whether it is set.
	option func(o Options) (any, bool)
	// validate checks a typed value (from Options) and returns it in the
	// form Config holds, or the same kind of error text as parse.
	validate func(v any) (any, error)
	set      func(c *Config, v any)
	get      func(c Config) string
}

var keys = []key{
	{
		Key: Key{
			Env: EnvPrefix + "KV_CAPACITY", File: KeyKVCapacity, Field: "KVCapacity",
			Default: "512", Allowed: intRange(1, MaxKVCapacity),
			Description: "KV length per sequence that decodes and varlens captured into CUDA graphs (and the Reserve and PlanGraph calls) are planned for where the call's KVCapacity is 0; a graph's block tables must hold it (MaxBlocksPerSeq·BlockSize). Eager calls plan from MaxKVLen and host lengths instead.",
		},
		parse:    intParser(1, MaxKVCapacity),
		option:   func(o Options) (any, bool) { return deref(o.KVCapacity) },
		validate: func(v any) (any, error) { return v, checkRange(int64(v.(int)), 1, MaxKVCapacity) },
		set:      func(c *Config, v any) { c.KVCapacity = v.(int) },
		get:      func(c Config) string { return strconv.Itoa(c.KVCapacity) },
	},
	{
		Key: Key{
			Env: EnvPrefix + "PAGED_FLASH_SPLITS", File: KeyPagedFlashSplits, Field: "PagedFlashSplits",
			Default: "auto", Allowed: "auto (any case) or " + intRange(1, MaxPagedFlashSplits),
			Description: "Split count for split-K batched decode; auto (0 in Go) lets the planner choose; a forced count is lowered where a sequence has fewer pages (each split takes whole pages) or the scratch limit is smaller, and the plan says so.",
		},
		parse: func(s string) (any, error) {
			if strings.EqualFold(s, "auto") {
				return 0, nil
			}
			return intParser(1, MaxPagedFlashSplits)(s)
		},
		option: func(o Options) (any, bool) { return deref(o.PagedFlashSplits) },
		validate: func(v any) (any, error) {
			if v.(int) == 0 {
				return v, nil
			}
			return v, checkRange(int64(v.(int)), 1, MaxPagedFlashSplits)
		},
		set: func(c *Config, v any) { c.PagedFlashSplits = v.(int) },
		get: func(c Config) string {
			if c.PagedFlashSplits == 0 {
				return "auto"
			}
			return strconv.Itoa(c.PagedFlashSplits)
		},
	},
	{
		Key: Key{
			Env: EnvPrefix + "PAGED_FLASH", File: KeyPagedFlash, Field: "PagedFlash",
			Default: "true", Allowed: boolAllowed,
			Description: "Allow the split-K (flash-decoding) path of batched decode; false forces single-pass decode. Varlen attention follows SPLIT_K_ATTN instead.",
		},
		parse:    parseBool,
		option:   func(o Options) (any, bool) { return deref(o.PagedFlash) },
		validate: anyValue,
		set:      func(c *Config, v any) { c.PagedFlash = v.(bool) },
		get:      func(c Config) string { return strconv.FormatBool(c.PagedFlash) },
	},
	{
		Key: Key{
			Env: EnvPrefix + "SPLIT_K_ATTN", File: KeySplitKAttn, Field: "SplitKAttn",
			Default: "auto", Allowed: splitModeAllowed,
			Description: "Split-K for varlen attention (prefill, chunked prefill, verify steps; PAGED_FLASH governs batched decode): auto lets the planner decide, off (0) disables it, on (1) forces it where the KV is long enough to split.",
		},
		parse:    parseSplitMode,
		option:   func(o Options) (any, bool) { return deref(o.SplitKAttn) },
		validate: validateSplitMode,
		set:      func(c *Config, v any) { c.SplitKAttn = v.(SplitMode) },
		get:      func(c Config) string { return c.SplitKAttn.String() },
	},
	{
		Key: Key{
			Env: EnvPrefix + "SCRATCH_LIMIT_BYTES", File: KeyScratchLimitBytes, Field: "ScratchLimitBytes",
			Default: strconv.Itoa(1 << 30), Allowed: "an integer >= 0 (0 = no limit)",
			Description: "Cap in bytes on each stream's split-K scratch buffer (so up to this much per stream, plus buffers retired by growth that captured graphs still hold); plans that exceed it use fewer splits.",
		},
		parse: func(s string) (any, error) {
			n, err := parseInt(s)
			if err != nil {
				return nil, err
			}
			if n < 0 {
				return nil, errOutOfRange
			}
			return n, nil
		},
		option: func(o Options) (any, bool) { return deref(o.ScratchLimitBytes) },
		validate: func(v any) (any, error) {
			if v.(int64) < 0 {
				return nil, errOutOfRange
			}
			return v, nil
		},
		set: func(c *Config, v any) { c.ScratchLimitBytes = v.(int64) },
		get: func(c Config) string { return strconv.FormatInt(c.ScratchLimitBytes, 10) },
	},
	{
		Key: Key{
			Env: EnvPrefix + "CHECK_BOUNDS", File: KeyCheckBounds, Field: "CheckBounds",
			Default: "false", Allowed: boolAllowed,
			Description: "After every op, wait for the stream and return as an error any bad slot, block-table entry or kv length the kernels found (they never read or write outside the buffers either way).",
		},
		parse:    parseBool,
		option:   func(o Options) (any, bool) { return deref(o.CheckBounds) },
		validate: anyValue,
		set:      func(c *Config, v any) { c.CheckBounds = v.(bool) },
		get:      func(c Config) string { return strconv.FormatBool(c.CheckBounds) },
	},
	{
		Key: Key{
			Env: EnvPrefix + "DECODE_CLUSTERS", File: KeyDecodeClusters, Field: "DecodeClusters",
			Default: "true", Allowed: boolAllowed,
			Description: "On sm_90 and newer, let a split-K decode of up to 8 splits (a forced count, or an automatic one whose splits are at most 2048 tokens) run its splits as one thread-block cluster that merges on chip; false keeps the merge in global memory.",
		},
		parse:    parseBool,
		option:   func(o Options) (any, bool) { return deref(o.DecodeClusters) },
		validate: anyValue,
		set:      func(c *Config, v any) { c.DecodeClusters = v.(bool) },
		get:      func(c Config) string { return strconv.FormatBool(c.DecodeClusters) },
	},
	{
		Key: Key{
			Env: EnvPrefix + "VARLEN_CLUSTERS", File: KeyVarlenClusters, Field: "VarlenClusters",
			Default: "true", Allowed: boolAllowed,
			Description: "On sm_90 and newer, let a split-K varlen of up to 8 splits over a flash- or HND-layout cache of the queries' type, without score modifiers, run each row tile's splits as one thread-block cluster that merges on chip in the same launch (not the 64-key-tile or wgmma kernels, whose splits always merge in global memory); false merges in global memory with a second launch.",
		},
		parse:    parseBool,
		option:   func(o Options) (any, bool) { return deref(o.VarlenClusters) },
		validate: anyValue,
		set:      func(c *Config, v any) { c.VarlenClusters = v.(bool) },
		get:      func(c Config) string { return strconv.FormatBool(c.VarlenClusters) },
	},
	{
		Key: Key{
			Env: EnvPrefix + "VARLEN_WGMMA", File: KeyVarlenWGMMA, Field: "VarlenWGMMA",
			Default: "auto", Allowed: splitModeAllowed,
			Description: "On sm_90 (H100, H200), the wgmma kernels (Hopper's warpgroup tensor-core instructions, sm_90a modules) for a varlen over a flash- or HND-layout cache of the queries' type at head dim 64 or 128, with or without score modifiers. auto takes them where they measured faster: for short query rows from a longest KV of 1024 tokens, for prefills from 2048 where the sequences average 512 query tokens or more and, without score modifiers, the 128-row blocks fill at most 8 waves of the GPU; on (1) wherever they apply; off (0) keeps the mma.sync kernels every GPU runs.",
		},
		parse:    parseSplitMode,
		option:   func(o Options) (any, bool) { return deref(o.VarlenWGMMA) },
		validate: validateSplitMode,
		set:      func(c *Config, v any) { c.VarlenWGMMA = v.(SplitMode) },
		get:      func(c Config) string { return c.VarlenWGMMA.String() },
	},
	{
		Key: Key{
			Env: EnvPrefix + "DECODE_NARROW", File: KeyDecodeNarrow, Field: "DecodeNarrow",
			Default: "true", Allowed: boolAllowed,
			Description: "For GQA groups up to 8, decode with the narrow kernels (the group's heads are the 8 columns of the tensor-core tile: half the math and registers); false uses the kernels that serve every group.",
		},
		parse:    parseBool,
		option:   func(o Options) (any, bool) { return deref(o.DecodeNarrow) },
		validate: anyValue,
		set:      func(c *Config, v any) { c.DecodeNarrow = v.(bool) },
		get:      func(c Config) string { return strconv.FormatBool(c.DecodeNarrow) },
	},
	{
		Key: Key{
			Env: EnvPrefix + "DECODE_BALANCE", File: KeyDecodeBalance, Field: "DecodeBalance",
			Default: "auto", Allowed: splitModeAllowed,
			Description: "Balanced decode: the kernels split each sequence from its real kv length so a ragged batch spreads over the GPU. auto uses it, for 16 or more sequences, in decodes captured into graphs and eager decodes without DecodeArgs.HostKVLens, and for eager decodes whose HostKVLens are ragged; off (0) never; on (1) always (where split-K is allowed).",
		},
		parse:    parseSplitMode,
		option:   func(o Options) (any, bool) { return deref(o.DecodeBalance) },
		validate: validateSplitMode,
		set:      func(c *Config, v any) { c.DecodeBalance = v.(SplitMode) },
		get:      func(c Config) string { return c.DecodeBalance.String() },
	},
	{
		Key: Key{
			Env: EnvPrefix + "LOAD_SASS", File: KeyLoadSASS, Field: "LoadSASS",
			Default: "auto", Allowed: splitModeAllowed,
			Description: "Which machine code a module loads. Each module embeds SASS for the architectures it runs on (ptxas 11.8's for sm_80, sm_86, sm_89 and sm_90; the sm_90a wgmma modules' by CUDA 12.4's ptxas) beside its PTX, which the driver JIT-compiles (seconds per module on a machine without the driver's JIT cache, milliseconds for SASS); the modules whose SASS measured slower than the driver's JIT code on an architecture (ptx.JITFaster: on sm_90 most varlen and fp8 decode modules) can also embed that JIT code, harvested from the driver's JIT cache on such a GPU (ptx/jit.json). auto loads the recorded JIT code where there is some for the GPU's architecture and the running driver is at least as new as the recording one; else the SASS where the GPU runs it, except that a module whose SASS is slower loads its PTX when no JIT code is recorded for it (its SASS when the recorded code needs a newer driver); on (1) loads the SASS wherever there is one; off (0) always loads the PTX. A module whose recorded JIT code the driver refuses loads its SASS, then its PTX; one whose SASS it refuses, its PTX.",
		},
		parse:    parseSplitMode,
		option:   func(o Options) (any, bool) { return deref(o.LoadSASS) },
		validate: validateSplitMode,
		set:      func(c *Config, v any) { c.LoadSASS = v.(SplitMode) },
		get:      func(c Config) string { return c.LoadSASS.String() },
	},
}

// parseSplitMode parses "auto" (any case) as SplitAuto and every spelling
// parseBool accepts as SplitOn or SplitOff: one grammar for on and off across
// the knobs.
func parseSplitMode(s string) (any, error) {
	if s == "" {
		return nil, errEmpty
	}
	if strings.EqualFold(s, "auto") {
		return SplitAuto, nil
	}
	b, err := parseBool(s)
	if err != nil {
		return nil, errNotAllowed
	}
	if b.(bool) {
		return SplitOn, nil
	}
	return SplitOff, nil
}

// validateSplitMode checks a SplitMode given as an option, which may be
// spelled any way parseSplitMode accepts, and returns SplitAuto, SplitOff or
// SplitOn.
func validateSplitMode(v any) (any, error) { return parseSplitMode(string(v.(SplitMode))) }

// anyValue is the validate of knobs whose every Go value is allowed.
func anyValue(v any) (any, error) { return v, nil }

// Keys returns every knob in a fixed order. The slice is a copy.
func Keys() []Key {
	out := make([]Key, len(keys))
	for i, k := range keys {
		out[i] = k.Key
	}
	return out
}

// KeysTable returns Keys as rows of text for a table, header first:
// environment variable, file key, field, default, allowed, description.
func KeysTable() [][]string {
	rows := [][]string{{"ENV", "FILE KEY", "FIELD", "DEFAULT", "ALLOWED", "DESCRIPTION"}}
	for _, k := range keys {
		rows = append(rows, []string{k.Env, k.File, k.Field, k.Default, k.Allowed, k.Description})
	}
	return rows
}

func lookupKey(fileKey string) (key, bool) {
	for _, k := range keys {
		if k.File == fileKey {
			return k, true
		}
	}
	return key{}, false
}

func knownFileKeys() string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.File
	}
	return strings.Join(names, ", ")
}

const (
	boolAllowed      = "1, 0, true, false, on, off (any case)"
	splitModeAllowed = "auto, " + boolAllowed
)

// valueError is the reason part of an invalid-value error.
type valueError string

func (e valueError) Error() string { return string(e) }

const (
	errEmpty           valueError = "is empty"
	errNotInteger      valueError = "is not an integer"
	errNotPlainInteger valueError = `is not a plain integer (no "+" sign, leading zero or -0)`
	errOutOfRange      valueError = "is out of range"
	errNotAllowed      valueError = "is not allowed"
	errNotBool         valueError = "is not a boolean"
	errNotScalar       valueError = "is not a scalar"
)

func intRange(lo, hi int64) string { return fmt.Sprintf("%d..%d", lo, hi) }

// parseInt accepts one spelling per integer: "0", or decimal digits without
// a leading zero after an optional "-" (no knob takes a negative value, but
// "-1" reads better as out of range than as not an integer). Everything else
// is rejected rather than read one way by one source and another way (or not
// at all) by the next: a "+" sign, leading zeros (octal in YAML, an error in
// TOML), "-0", exponents and fractions (floats in YAML and TOML, even when
// integral, like 5e2 or 512.0), hexadecimal, octal and binary prefixes, digit
// separators, units and surrounding space.
func parseInt(s string) (int64, error) {
	if s == "" {
		return 0, errEmpty
	}
	sign, digits := "", s
	if s[0] == '-' || s[0] == '+' {
		sign, digits = s[:1], s[1:]
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, errNotInteger
	}
	if sign == "+" || (digits[0] == '0' && (len(digits) > 1 || sign == "-")) {
		return 0, errNotPlainInteger
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// The text is all digits, so the one way left to fail is range.
		return 0, errOutOfRange
	}
	return n, nil
}

func intParser(lo, hi int64) func(string) (any, error) {
	return func(s string) (any, error) {
		n, err := parseInt(s)
		if err != nil {
			return nil, err
		}
		if err := checkRange(n, lo, hi); err != nil {
			return nil, err
		}
		return int(n), nil
	}
}

func checkRange(n, lo, hi int64) error {
	if n < lo || n > hi {
		return errOutOfRange
	}
	return nil
}

// parseBool accepts 1, 0, true, false, on and off, in any case, and nothing
// else: not yes and no (a boolean in YAML 1.1, a string in YAML 1.2), not
// other integers, not surrounding space.
func parseBool(s string) (any, error) {
	if s == "" {
		return nil, errEmpty
	}
	switch strings.ToLower(s) {
	case "1", "true", "on":
		return true, nil
	case "0", "false", "off":
		return false, nil
	}
	return nil, errNotBool
}

func deref[T any](p *T) (any, bool) {
	if p == nil {
		return nil, false
	}
	return *p, true
}
