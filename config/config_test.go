package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clearEnv unsets every PAGEDKV_ variable for the test, so that the
// developer's own environment cannot leak into results.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) {
			t.Setenv(name, "") // registers restoration
			require.NoError(t, os.Unsetenv(name))
		}
	}
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

func ptr[T any](v T) *T { return &v }

func TestKeysShareOneName(t *testing.T) {
	for _, k := range Keys() {
		assert.Equal(t, EnvPrefix+strings.ToUpper(k.File), k.Env)
		assert.NotEmpty(t, k.Field)
		assert.NotEmpty(t, k.Allowed)
		assert.NotEmpty(t, k.Description)
	}
	assert.Len(t, KeysTable(), len(Keys())+1)
}

func TestDefaults(t *testing.T) {
	clearEnv(t)
	c, err := Load(Options{})
	require.NoError(t, err)
	want := Config{
		KVCapacity:        512,
		PagedFlashSplits:  0,
		PagedFlash:        true,
		SplitKAttn:        SplitAuto,
		ScratchLimitBytes: 1 << 30,
		CheckBounds:       false,
		DecodeClusters:    true,
		VarlenClusters:    true,
		VarlenWGMMA:       SplitAuto,
		DecodeNarrow:      true,
		DecodeBalance:     SplitAuto,
		LoadSASS:          SplitAuto,
	}
	want.Sources = c.Sources
	assert.Equal(t, want, c)
	assert.Equal(t, Default(), c)
	for _, k := range Keys() {
		assert.Equal(t, SourceDefault, c.Source(k.File), k.File)
		v, ok := c.Value(k.File)
		require.True(t, ok)
		assert.Equal(t, k.Default, v, k.File)
	}
}

func TestEnvValues(t *testing.T) {
	tests := []struct {
		env, value string
		check      func(t *testing.T, c Config)
	}{
		{"PAGEDKV_KV_CAPACITY", "1", func(t *testing.T, c Config) { assert.Equal(t, 1, c.KVCapacity) }},
		{"PAGEDKV_KV_CAPACITY", "16777216", func(t *testing.T, c Config) { assert.Equal(t, 1<<24, c.KVCapacity) }},
		{"PAGEDKV_PAGED_FLASH_SPLITS", "auto", func(t *testing.T, c Config) { assert.Equal(t, 0, c.PagedFlashSplits) }},
		{"PAGEDKV_PAGED_FLASH_SPLITS", "AUTO", func(t *testing.T, c Config) { assert.Equal(t, 0, c.PagedFlashSplits) }},
		{"PAGEDKV_PAGED_FLASH_SPLITS", "1", func(t *testing.T, c Config) { assert.Equal(t, 1, c.PagedFlashSplits) }},
		{"PAGEDKV_PAGED_FLASH_SPLITS", "64", func(t *testing.T, c Config) { assert.Equal(t, 64, c.PagedFlashSplits) }},
		{"PAGEDKV_PAGED_FLASH", "0", func(t *testing.T, c Config) { assert.False(t, c.PagedFlash) }},
		{"PAGEDKV_PAGED_FLASH", "off", func(t *testing.T, c Config) { assert.False(t, c.PagedFlash) }},
		{"PAGEDKV_PAGED_FLASH", "FALSE", func(t *testing.T, c Config) { assert.False(t, c.PagedFlash) }},
		{"PAGEDKV_PAGED_FLASH", "On", func(t *testing.T, c Config) { assert.True(t, c.PagedFlash) }},
		{"PAGEDKV_SPLIT_K_ATTN", "0", func(t *testing.T, c Config) { assert.Equal(t, SplitOff, c.SplitKAttn) }},
		{"PAGEDKV_SPLIT_K_ATTN", "1", func(t *testing.T, c Config) { assert.Equal(t, SplitOn, c.SplitKAttn) }},
		{"PAGEDKV_SPLIT_K_ATTN", "Auto", func(t *testing.T, c Config) { assert.Equal(t, SplitAuto, c.SplitKAttn) }},
		{"PAGEDKV_DECODE_BALANCE", "0", func(t *testing.T, c Config) { assert.Equal(t, SplitOff, c.DecodeBalance) }},
		{"PAGEDKV_DECODE_BALANCE", "1", func(t *testing.T, c Config) { assert.Equal(t, SplitOn, c.DecodeBalance) }},
		{"PAGEDKV_SCRATCH_LIMIT_BYTES", "0", func(t *testing.T, c Config) { assert.Equal(t, int64(0), c.ScratchLimitBytes) }},
		{"PAGEDKV_SCRATCH_LIMIT_BYTES", "8589934592", func(t *testing.T, c Config) { assert.Equal(t, int64(8<<30), c.ScratchLimitBytes) }},
		{"PAGEDKV_CHECK_BOUNDS", "1", func(t *testing.T, c Config) { assert.True(t, c.CheckBounds) }},
		{"PAGEDKV_CHECK_BOUNDS", "true", func(t *testing.T, c Config) { assert.True(t, c.CheckBounds) }},
	}
	for _, tt := range tests {
		t.Run(tt.env+"="+tt.value, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(tt.env, tt.value)
			c, err := Load(Options{})
			require.NoError(t, err)
			tt.check(t, c)
			key := strings.ToLower(strings.TrimPrefix(tt.env, EnvPrefix))
			assert.Equal(t, SourceEnv, c.Source(key))
		})
	}
}

func TestEmptyEnvIsError(t *testing.T) {
	for _, k := range Keys() {
		t.Run(k.Env, func(t *testing.T) {
			clearEnv(t)
			// A file value must not win silently over the empty variable.
			t.Setenv(EnvConfigFile, writeFile(t, "c.yaml", k.File+": "+k.Default+"\n"))
			t.Setenv(k.Env, "")
			_, err := Load(Options{})
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, "config: "+k.Env+`="" is empty; allowed: `+k.Allowed, err.Error())
		})
	}
}

func TestEnvErrors(t *testing.T) {
	tests := []struct{ env, value, want string }{
		{"PAGEDKV_KV_CAPACITY", "abc", `config: PAGEDKV_KV_CAPACITY="abc" is not an integer; allowed: 1..16777216`},
		{"PAGEDKV_KV_CAPACITY", "0", `config: PAGEDKV_KV_CAPACITY="0" is out of range; allowed: 1..16777216`},
		{"PAGEDKV_KV_CAPACITY", "16777217", `config: PAGEDKV_KV_CAPACITY="16777217" is out of range; allowed: 1..16777216`},
		{"PAGEDKV_KV_CAPACITY", "1e3", `config: PAGEDKV_KV_CAPACITY="1e3" is not an integer; allowed: 1..16777216`},
		{"PAGEDKV_KV_CAPACITY", " 5", `config: PAGEDKV_KV_CAPACITY=" 5" is not an integer; allowed: 1..16777216`},
		{"PAGEDKV_PAGED_FLASH_SPLITS", "0", `config: PAGEDKV_PAGED_FLASH_SPLITS="0" is out of range; allowed: auto (any case) or 1..64`},
		{"PAGEDKV_PAGED_FLASH_SPLITS", "65", `config: PAGEDKV_PAGED_FLASH_SPLITS="65" is out of range; allowed: auto (any case) or 1..64`},
		{"PAGEDKV_PAGED_FLASH_SPLITS", "256", `config: PAGEDKV_PAGED_FLASH_SPLITS="256" is out of range; allowed: auto (any case) or 1..64`},
		{"PAGEDKV_PAGED_FLASH_SPLITS", "four", `config: PAGEDKV_PAGED_FLASH_SPLITS="four" is not an integer; allowed: auto (any case) or 1..64`},
		{"PAGEDKV_PAGED_FLASH", "yes", `config: PAGEDKV_PAGED_FLASH="yes" is not a boolean; allowed: 1, 0, true, false, on, off (any case)`},
		{"PAGEDKV_PAGED_FLASH", "2", `config: PAGEDKV_PAGED_FLASH="2" is not a boolean; allowed: 1, 0, true, false, on, off (any case)`},
		{"PAGEDKV_SPLIT_K_ATTN", "2", `config: PAGEDKV_SPLIT_K_ATTN="2" is not allowed; allowed: auto, 1, 0, true, false, on, off (any case)`},
		{"PAGEDKV_SPLIT_K_ATTN", "yes", `config: PAGEDKV_SPLIT_K_ATTN="yes" is not allowed; allowed: auto, 1, 0, true, false, on, off (any case)`},
		{"PAGEDKV_SPLIT_K_ATTN", "automatic", `config: PAGEDKV_SPLIT_K_ATTN="automatic" is not allowed; allowed: auto, 1, 0, true, false, on, off (any case)`},
		{"PAGEDKV_DECODE_BALANCE", "-1", `config: PAGEDKV_DECODE_BALANCE="-1" is not allowed; allowed: auto, 1, 0, true, false, on, off (any case)`},
		{"PAGEDKV_DECODE_BALANCE", " on", `config: PAGEDKV_DECODE_BALANCE=" on" is not allowed; allowed: auto, 1, 0, true, false, on, off (any case)`},
		{"PAGEDKV_SCRATCH_LIMIT_BYTES", "-1", `config: PAGEDKV_SCRATCH_LIMIT_BYTES="-1" is out of range; allowed: an integer >= 0 (0 = no limit)`},
		{"PAGEDKV_SCRATCH_LIMIT_BYTES", "1GiB", `config: PAGEDKV_SCRATCH_LIMIT_BYTES="1GiB" is not an integer; allowed: an integer >= 0 (0 = no limit)`},
		{"PAGEDKV_SCRATCH_LIMIT_BYTES", "99999999999999999999", `config: PAGEDKV_SCRATCH_LIMIT_BYTES="99999999999999999999" is out of range; allowed: an integer >= 0 (0 = no limit)`},
		{"PAGEDKV_CHECK_BOUNDS", "maybe", `config: PAGEDKV_CHECK_BOUNDS="maybe" is not a boolean; allowed: 1, 0, true, false, on, off (any case)`},
	}
	for _, tt := range tests {
		t.Run(tt.env+"="+tt.value, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(tt.env, tt.value)
			_, err := Load(Options{})
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

func TestOptionErrors(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"capacity", Options{KVCapacity: ptr(0)}, `config: Options.KVCapacity=0 is out of range; allowed: 1..16777216`},
		{"splits", Options{PagedFlashSplits: ptr(65)}, `config: Options.PagedFlashSplits=65 is out of range; allowed: auto (any case) or 1..64`},
		{"splits negative", Options{PagedFlashSplits: ptr(-1)}, `config: Options.PagedFlashSplits=-1 is out of range; allowed: auto (any case) or 1..64`},
		{"split mode", Options{SplitKAttn: ptr(SplitMode("yes"))}, `config: Options.SplitKAttn="yes" is not allowed; allowed: auto, 1, 0, true, false, on, off (any case)`},
		{"split mode empty", Options{DecodeBalance: ptr(SplitMode(""))}, `config: Options.DecodeBalance="" is empty; allowed: auto, 1, 0, true, false, on, off (any case)`},
		{"scratch", Options{ScratchLimitBytes: ptr(int64(-5))}, `config: Options.ScratchLimitBytes=-5 is out of range; allowed: an integer >= 0 (0 = no limit)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			_, err := Load(tt.opts)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

func TestFile(t *testing.T) {
	tests := []struct{ name, body string }{
		{"c.yaml", "kv_capacity: 4096\npaged_flash_splits: 16\npaged_flash: off\nsplit_k_attn: 1\nscratch_limit_bytes: 0\ncheck_bounds: true\ndecode_clusters: false\nvarlen_clusters: false\nvarlen_wgmma: false\ndecode_narrow: false\ndecode_balance: 0\nload_sass: on\n"},
		{"c.yml", "kv_capacity: \"4096\"\npaged_flash_splits: 16\npaged_flash: false\nsplit_k_attn: \"1\"\nscratch_limit_bytes: 0\ncheck_bounds: 1\ndecode_clusters: off\nvarlen_clusters: off\nvarlen_wgmma: off\ndecode_narrow: off\ndecode_balance: \"0\"\nload_sass: true\n"},
		{"c.toml", "kv_capacity = 4096\npaged_flash_splits = 16\npaged_flash = false\nsplit_k_attn = \"1\"\nscratch_limit_bytes = 0\ncheck_bounds = true\ndecode_clusters = false\nvarlen_clusters = false\nvarlen_wgmma = false\ndecode_narrow = false\ndecode_balance = \"0\"\nload_sass = true\n"},
		{"c.TOML", "kv_capacity = 4096\npaged_flash_splits = 16\npaged_flash = \"off\"\nsplit_k_attn = 1\nscratch_limit_bytes = 0\ncheck_bounds = \"on\"\ndecode_clusters = \"0\"\nvarlen_clusters = \"0\"\nvarlen_wgmma = \"0\"\ndecode_narrow = \"0\"\ndecode_balance = 0\nload_sass = \"1\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			path := writeFile(t, tt.name, tt.body)
			t.Setenv(EnvConfigFile, path)
			c, err := Load(Options{})
			require.NoError(t, err)
			assert.Equal(t, 4096, c.KVCapacity)
			assert.Equal(t, 16, c.PagedFlashSplits)
			assert.False(t, c.PagedFlash)
			assert.Equal(t, SplitOn, c.SplitKAttn)
			assert.Equal(t, int64(0), c.ScratchLimitBytes)
			assert.True(t, c.CheckBounds)
			assert.False(t, c.DecodeClusters)
			assert.False(t, c.VarlenClusters)
			assert.Equal(t, SplitOff, c.VarlenWGMMA)
			assert.False(t, c.DecodeNarrow)
			assert.Equal(t, SplitOff, c.DecodeBalance)
			assert.Equal(t, SplitOn, c.LoadSASS)
			for _, k := range Keys() {
				assert.Equal(t, FileSource(path), c.Source(k.File), k.File)
				assert.True(t, c.Source(k.File).IsFile())
			}
		})
	}
}

func TestFileErrors(t *testing.T) {
	tests := []struct {
		name, body string
		want       string // with PATH standing for the file's path
	}{
		{"c.yaml", "kv_capacity: abc\n", `config: PATH: kv_capacity="abc" is not an integer; allowed: 1..16777216`},
		{"c.yaml", "kv_capacity: 0\n", `config: PATH: kv_capacity=0 is out of range; allowed: 1..16777216`},
		{"c.yaml", "kv_capacity: 1.5\n", `config: PATH: kv_capacity=1.5 is not an integer; allowed: 1..16777216`},
		{"c.toml", "scratch_limit_bytes = -1\n", `config: PATH: scratch_limit_bytes=-1 is out of range; allowed: an integer >= 0 (0 = no limit)`},
		{"c.yaml", "split_k_attn: 2\n", `config: PATH: split_k_attn=2 is not allowed; allowed: auto, 1, 0, true, false, on, off (any case)`},
		{"c.toml", "decode_balance = \"yes\"\n", `config: PATH: decode_balance="yes" is not allowed; allowed: auto, 1, 0, true, false, on, off (any case)`},
		{"c.yaml", "paged_flash_splits: 65\n", `config: PATH: paged_flash_splits=65 is out of range; allowed: auto (any case) or 1..64`},
		{"c.yaml", "check_bounds: [1]\n", `config: PATH: check_bounds=[1] is not a scalar; allowed: 1, 0, true, false, on, off (any case)`},
		{"c.yaml", "kv_capacity:\n", `config: PATH: kv_capacity has no value; allowed: 1..16777216`},
		{"c.yaml", "kv_capacty: 5\n", `config: PATH: unknown key "kv_capacty"; known keys: kv_capacity, paged_flash_splits, paged_flash, split_k_attn, scratch_limit_bytes, check_bounds, decode_clusters, varlen_clusters, varlen_wgmma, decode_narrow, decode_balance, load_sass`},
		{"c.toml", "[kv]\ncapacity = 5\n", `config: PATH: unknown key "kv.capacity"; known keys: kv_capacity, paged_flash_splits, paged_flash, split_k_attn, scratch_limit_bytes, check_bounds, decode_clusters, varlen_clusters, varlen_wgmma, decode_narrow, decode_balance, load_sass`},
		{"c.json", "{}", `config: PAGEDKV_CONFIG="PATH" has extension ".json"; allowed: .yaml, .yml, .toml`},
	}
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.body, func(t *testing.T) {
			clearEnv(t)
			path := writeFile(t, tt.name, tt.body)
			t.Setenv(EnvConfigFile, path)
			_, err := Load(Options{})
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, strings.ReplaceAll(tt.want, "PATH", path), err.Error())
		})
	}
}

func TestFileMissing(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "absent.yaml")
	_, err := Load(Options{ConfigFile: &path})
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorIs(t, err, fs.ErrNotExist, "the cause stays visible")
	assert.Contains(t, err.Error(), `config: reading Options.ConfigFile="`+path+`"`)
}

func TestConfigFileOptionOverridesEnv(t *testing.T) {
	clearEnv(t)
	t.Setenv(EnvConfigFile, writeFile(t, "env.yaml", "kv_capacity: 1\n"))
	opt := writeFile(t, "opt.yaml", "kv_capacity: 2\n")
	c, err := Load(Options{ConfigFile: &opt})
	require.NoError(t, err)
	assert.Equal(t, 2, c.KVCapacity)
	assert.Equal(t, FileSource(opt), c.Source(KeyKVCapacity))

	c, err = Load(Options{ConfigFile: ptr("")})
	require.NoError(t, err)
	assert.Equal(t, 512, c.KVCapacity, "a pointer to an empty path disables the file")
	assert.Equal(t, SourceDefault, c.Source(KeyKVCapacity))
}

func TestPrecedence(t *testing.T) {
	tests := []struct {
		name       string
		file, env  bool
		opt        bool
		want       int
		wantSource func(path string) Source
	}{
		{"default", false, false, false, 512, func(string) Source { return SourceDefault }},
		{"file", true, false, false, 1000, FileSource},
		{"env over file", true, true, false, 2000, func(string) Source { return SourceEnv }},
		{"option over env and file", true, true, true, 3000, func(string) Source { return SourceOption }},
		{"option over file", true, false, true, 3000, func(string) Source { return SourceOption }},
		{"option over env", false, true, true, 3000, func(string) Source { return SourceOption }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			path := writeFile(t, "c.yaml", "kv_capacity: 1000\n")
			if tt.file {
				t.Setenv(EnvConfigFile, path)
			}
			if tt.env {
				t.Setenv("PAGEDKV_KV_CAPACITY", "2000")
			}
			var opts Options
			if tt.opt {
				opts.KVCapacity = ptr(3000)
			}
			c, err := Load(opts)
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.KVCapacity)
			assert.Equal(t, tt.wantSource(path), c.Source(KeyKVCapacity))
			// Other keys are untouched by this key's sources.
			assert.Equal(t, SourceDefault, c.Source(KeyCheckBounds))
		})
	}
}

func TestSourcesMixed(t *testing.T) {
	clearEnv(t)
	path := writeFile(t, "c.toml", "paged_flash = false\nscratch_limit_bytes = 4096\n")
	t.Setenv(EnvConfigFile, path)
	t.Setenv("PAGEDKV_SPLIT_K_ATTN", "0")
	c, err := Load(Options{CheckBounds: ptr(true), SplitKAttn: nil})
	require.NoError(t, err)
	assert.Equal(t, map[string]Source{
		KeyKVCapacity:        SourceDefault,
		KeyPagedFlashSplits:  SourceDefault,
		KeyPagedFlash:        FileSource(path),
		KeySplitKAttn:        SourceEnv,
		KeyScratchLimitBytes: FileSource(path),
		KeyCheckBounds:       SourceOption,
		KeyDecodeClusters:    SourceDefault,
		KeyVarlenClusters:    SourceDefault,
		KeyVarlenWGMMA:       SourceDefault,
		KeyDecodeNarrow:      SourceDefault,
		KeyDecodeBalance:     SourceDefault,
		KeyLoadSASS:          SourceDefault,
	}, c.Sources)

	table := c.Table()
	require.Len(t, table, len(Keys())+1)
	assert.Equal(t, []string{"PAGEDKV_SPLIT_K_ATTN", "0", "env", `auto, 1, 0, true, false, on, off (any case)`}, table[4])
	assert.Equal(t, Source(""), c.Source("nope"))
}

func TestOptionsAllKeys(t *testing.T) {
	clearEnv(t)
	c, err := Load(Options{
		KVCapacity:        ptr(64),
		PagedFlashSplits:  ptr(0),
		PagedFlash:        ptr(false),
		SplitKAttn:        ptr(SplitOff),
		ScratchLimitBytes: ptr(int64(123)),
		CheckBounds:       ptr(true),
		DecodeClusters:    ptr(false),
		VarlenClusters:    ptr(false),
		VarlenWGMMA:       ptr(SplitOff),
		DecodeNarrow:      ptr(false),
		DecodeBalance:     ptr(SplitOn),
		LoadSASS:          ptr(SplitOn),
	})
	require.NoError(t, err)
	assert.Equal(t, 64, c.KVCapacity)
	assert.Equal(t, 0, c.PagedFlashSplits)
	assert.False(t, c.PagedFlash)
	assert.Equal(t, SplitOff, c.SplitKAttn)
	assert.Equal(t, int64(123), c.ScratchLimitBytes)
	assert.True(t, c.CheckBounds)
	assert.False(t, c.DecodeClusters)
	assert.False(t, c.VarlenClusters)
	assert.Equal(t, SplitOff, c.VarlenWGMMA)
	assert.False(t, c.DecodeNarrow)
	assert.Equal(t, SplitOn, c.DecodeBalance)
	assert.Equal(t, SplitOn, c.LoadSASS)
	for _, k := range Keys() {
		assert.Equal(t, SourceOption, c.Source(k.File), k.File)
	}
}

func TestSplitModeSpellings(t *testing.T) {
	tests := []struct {
		value string
		want  SplitMode
	}{
		{"auto", SplitAuto}, {"AUTO", SplitAuto}, {"Auto", SplitAuto},
		{"1", SplitOn}, {"true", SplitOn}, {"TRUE", SplitOn}, {"on", SplitOn}, {"On", SplitOn},
		{"0", SplitOff}, {"false", SplitOff}, {"False", SplitOff}, {"off", SplitOff}, {"OFF", SplitOff},
	}
	knobs := []struct {
		env, file string
		opt       func(m SplitMode) Options
		get       func(c Config) SplitMode
	}{
		{"PAGEDKV_SPLIT_K_ATTN", KeySplitKAttn,
			func(m SplitMode) Options { return Options{SplitKAttn: &m} },
			func(c Config) SplitMode { return c.SplitKAttn }},
		{"PAGEDKV_DECODE_BALANCE", KeyDecodeBalance,
			func(m SplitMode) Options { return Options{DecodeBalance: &m} },
			func(c Config) SplitMode { return c.DecodeBalance }},
		{"PAGEDKV_LOAD_SASS", KeyLoadSASS,
			func(m SplitMode) Options { return Options{LoadSASS: &m} },
			func(c Config) SplitMode { return c.LoadSASS }},
	}
	for _, k := range knobs {
		for _, tt := range tests {
			t.Run(k.env+"="+tt.value, func(t *testing.T) {
				clearEnv(t)
				t.Setenv(k.env, tt.value)
				c, err := Load(Options{})
				require.NoError(t, err)
				assert.Equal(t, tt.want, k.get(c))
				v, _ := c.Value(k.file)
				assert.Equal(t, string(tt.want), v, "Value spells the mode canonically")
			})
			t.Run(k.file+" file "+tt.value, func(t *testing.T) {
				clearEnv(t)
				t.Setenv(EnvConfigFile, writeFile(t, "c.yaml", k.file+": \""+tt.value+"\"\n"))
				c, err := Load(Options{})
				require.NoError(t, err)
				assert.Equal(t, tt.want, k.get(c))
			})
			t.Run(k.file+" option "+tt.value, func(t *testing.T) {
				clearEnv(t)
				c, err := Load(k.opt(SplitMode(tt.value)))
				require.NoError(t, err)
				assert.Equal(t, tt.want, k.get(c), "options are stored canonically")
			})
		}
	}
}

func TestSplitModeFileBooleans(t *testing.T) {
	tests := []struct {
		name, body string
		want       SplitMode
	}{
		{"c.toml", "split_k_attn = true\n", SplitOn},
		{"c.toml", "split_k_attn = false\n", SplitOff},
		{"c.yaml", "split_k_attn: true\n", SplitOn},
		{"c.yaml", "split_k_attn: off\n", SplitOff},
		{"c.yaml", "split_k_attn: 0\n", SplitOff},
	}
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.body, func(t *testing.T) {
			clearEnv(t)
			t.Setenv(EnvConfigFile, writeFile(t, tt.name, tt.body))
			c, err := Load(Options{})
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.SplitKAttn)
		})
	}
}

func TestPagedFlashSplitsLimit(t *testing.T) {
	assert.Equal(t, 64, MaxPagedFlashSplits, "must equal dispatch.MaxSplits")
	clearEnv(t)
	c, err := Load(Options{PagedFlashSplits: ptr(MaxPagedFlashSplits)})
	require.NoError(t, err)
	assert.Equal(t, MaxPagedFlashSplits, c.PagedFlashSplits)
}

// knownEnvText is how unknown-variable errors list the known variables.
const knownEnvText = "PAGEDKV_KV_CAPACITY, PAGEDKV_PAGED_FLASH_SPLITS, PAGEDKV_PAGED_FLASH, PAGEDKV_SPLIT_K_ATTN, PAGEDKV_SCRATCH_LIMIT_BYTES, PAGEDKV_CHECK_BOUNDS, PAGEDKV_DECODE_CLUSTERS, PAGEDKV_VARLEN_CLUSTERS, PAGEDKV_VARLEN_WGMMA, PAGEDKV_DECODE_NARROW, PAGEDKV_DECODE_BALANCE, PAGEDKV_LOAD_SASS, PAGEDKV_CONFIG, PAGEDKV_TEST_SEED"

func TestUnknownEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		opts Options
		want string // "" for no error; else the text before "; known variables: …"
	}{
		{"misspelled", map[string]string{"PAGEDKV_KV_CAPACTY": "1024"},
			Options{}, "config: unknown environment variable PAGEDKV_KV_CAPACTY (did you mean PAGEDKV_KV_CAPACITY?)"},
		{"missing underscore", map[string]string{"PAGEDKV_SPLITK_ATTN": "1"},
			Options{}, "config: unknown environment variable PAGEDKV_SPLITK_ATTN (did you mean PAGEDKV_SPLIT_K_ATTN?)"},
		{"lower case", map[string]string{"PAGEDKV_paged_flash": "0"},
			Options{}, "config: unknown environment variable PAGEDKV_paged_flash (did you mean PAGEDKV_PAGED_FLASH?)"},
		{"singular", map[string]string{"PAGEDKV_PAGED_FLASH_SPLIT": "8"},
			Options{}, "config: unknown environment variable PAGEDKV_PAGED_FLASH_SPLIT (did you mean PAGEDKV_PAGED_FLASH_SPLITS?)"},
		{"truncated", map[string]string{"PAGEDKV_SCRATCH_LIMIT": "0"},
			Options{}, "config: unknown environment variable PAGEDKV_SCRATCH_LIMIT (did you mean PAGEDKV_SCRATCH_LIMIT_BYTES?)"},
		{"non-knob misspelled", map[string]string{"PAGEDKV_CONFG": "c.yaml"},
			Options{}, "config: unknown environment variable PAGEDKV_CONFG (did you mean PAGEDKV_CONFIG?)"},
		{"test seed misspelled", map[string]string{"PAGEDKV_TEST_SEEDS": "7"},
			Options{}, "config: unknown environment variable PAGEDKV_TEST_SEEDS (did you mean PAGEDKV_TEST_SEED?)"},
		{"nothing close", map[string]string{"PAGEDKV_FOO": "1"},
			Options{}, "config: unknown environment variable PAGEDKV_FOO"},
		{"empty value", map[string]string{"PAGEDKV_FOO": ""},
			Options{}, "config: unknown environment variable PAGEDKV_FOO"},
		{"prefix alone", map[string]string{"PAGEDKV_": "1"},
			Options{}, "config: unknown environment variable PAGEDKV_"},
		{"several, sorted", map[string]string{"PAGEDKV_KV_CAPACTY": "1", "PAGEDKV_FOO": "1", "PAGEDKV_DECODE_NARROW": "1"},
			Options{}, "config: unknown environment variables PAGEDKV_FOO, PAGEDKV_KV_CAPACTY (did you mean PAGEDKV_KV_CAPACITY?)"},
		{"options do not excuse it", map[string]string{"PAGEDKV_KV_CAPACTY": "1"},
			Options{KVCapacity: ptr(1024), ConfigFile: ptr("")}, "config: unknown environment variable PAGEDKV_KV_CAPACTY (did you mean PAGEDKV_KV_CAPACITY?)"},
		{"test seed", map[string]string{EnvTestSeed: "7"}, Options{}, ""},
		{"empty config", map[string]string{EnvConfigFile: ""}, Options{}, ""},
		{"other prefix", map[string]string{"PAGEDKVX": "1", "pagedkv_kv_capacity": "1", "XPAGEDKV_FOO": "1"}, Options{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearEnv(t)
			for name, value := range tt.env {
				t.Setenv(name, value)
			}
			_, err := Load(tt.opts)
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tt.want+"; known variables: "+knownEnvText, err.Error())
		})
	}
}

func TestCheckEnvNames(t *testing.T) {
	tests := []struct {
		name    string
		environ []string
		want    string // "" for no error
	}{
		{"none", nil, ""},
		{"knobs and non-knobs", []string{"PAGEDKV_KV_CAPACITY=1", "PAGEDKV_CONFIG=", "PAGEDKV_TEST_SEED=3", "HOME=/root"}, ""},
		{"no equals sign", []string{"PAGEDKV_FOO"}, "config: unknown environment variable PAGEDKV_FOO; known variables: " + knownEnvText},
		{"duplicate", []string{"PAGEDKV_FOO=1", "PAGEDKV_FOO=2"}, "config: unknown environment variable PAGEDKV_FOO; known variables: " + knownEnvText},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkEnvNames(tt.environ)
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			assert.Equal(t, tt.want, err.Error())
		})
	}
}

func TestNonKnobEnv(t *testing.T) {
	got := NonKnobEnv()
	assert.Equal(t, []string{"PAGEDKV_CONFIG", "PAGEDKV_TEST_SEED"}, got)
	for _, name := range got {
		assert.True(t, strings.HasPrefix(name, EnvPrefix), name)
		for _, k := range Keys() {
			assert.NotEqual(t, k.Env, name, "a non-knob variable is not a knob")
		}
	}
	got[0] = "PAGEDKV_CHANGED"
	assert.Equal(t, EnvConfigFile, NonKnobEnv()[0], "NonKnobEnv returns a copy")
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "ABC", 3},
		{"ABC", "", 3},
		{"KV_CAPACITY", "KV_CAPACITY", 0},
		{"KV_CAPACTY", "KV_CAPACITY", 1},
		{"SPLITK_ATTN", "SPLIT_K_ATTN", 1},
		{"KITTEN", "SITTING", 3},
		{"FLAW", "LAWN", 2},
	}
	for _, tt := range tests {
		t.Run(tt.a+"/"+tt.b, func(t *testing.T) {
			assert.Equal(t, tt.want, editDistance(tt.a, tt.b))
			assert.Equal(t, tt.want, editDistance(tt.b, tt.a))
		})
	}
}
