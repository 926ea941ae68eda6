package pagedkv

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/ptx"
)

// paramStructs maps each kernel family (by entry-name prefix, longest match
// wins) to the Go struct whose fields are its parameters.
var paramStructs = map[string]reflect.Type{
	"cache_append_":       reflect.TypeFor[cacheAppendParams](),
	"cache_gather_":       reflect.TypeFor[cacheGatherParams](),
	"cache_claim_":        reflect.TypeFor[cacheClaimParams](),
	"paged_decode_":       reflect.TypeFor[pagedDecodeParams](),
	"rope_cache_":         reflect.TypeFor[ropeCacheParams](),
	"rope_values_":        reflect.TypeFor[ropeValuesParams](),
	"mla_rope_quant_":     reflect.TypeFor[mlaRopeQuantParams](),
	"mla_concat_q_":       reflect.TypeFor[mlaConcatQParams](),
	"qkv_norm_rope_":      reflect.TypeFor[qkvNormRopeParams](),
	"qkv_values_":         reflect.TypeFor[qkvValuesParams](),
	"decode_partition":    reflect.TypeFor[decodePartitionParams](),
	"paged_varlen_":       reflect.TypeFor[pagedVarlenParams](),
	"paged_varlen_merge_": reflect.TypeFor[varlenMergeParams](),
}

func paramStructFor(entry string) (reflect.Type, bool) {
	if strings.HasPrefix(entry, "paged_decode_") && strings.HasSuffix(entry, "_mods") {
		return reflect.TypeFor[pagedDecodeModsParams](), true
	}
	if strings.HasPrefix(entry, "paged_varlen_") && strings.HasSuffix(entry, "_mods") {
		return reflect.TypeFor[pagedVarlenModsParams](), true
	}
	best := ""
	for prefix := range paramStructs {
		if strings.HasPrefix(entry, prefix) && len(prefix) > len(best) {
			best = prefix
		}
	}
	t, ok := paramStructs[best]
	return t, ok
}

// TestEntrySignaturesMatchParamStructs parses every .entry of the embedded
// PTX and checks it parameter by parameter against the Go struct that the
// launcher packs for it: same count, same sizes, floats where floats are.
func TestEntrySignaturesMatchParamStructs(t *testing.T) {
	for _, mod := range ptx.Modules() {
		entries, err := ptx.ModuleEntries(mod)
		require.NoError(t, err, mod)
		for _, e := range entries {
			st, ok := paramStructFor(e.Name)
			if !assert.True(t, ok, "entry %s (module %s) has no Go parameter struct", e.Name, mod) {
				continue
			}
			fields, err := driver.ParamLayout(st)
			require.NoError(t, err, st.String())
			if !assert.Len(t, fields, len(e.Params), "%s: %d PTX parameters, %s has %d fields", e.Name, len(e.Params), st, len(fields)) {
				continue
			}
			for i, p := range e.Params {
				f := fields[i]
				assert.Equal(t, p.Size, int(f.Size), "%s parameter %d (%s): PTX .%s is %d bytes, %s.%s is %d", e.Name, i, p.Name, p.Type, p.Size, st, f.Name, f.Size)
				assert.Equal(t, p.Type == "f32" || p.Type == "f64", f.Float, "%s parameter %d: PTX .%s vs %s.%s", e.Name, i, p.Type, st, f.Name)
			}
		}
	}
}

// TestVarlenConstantsMatchKernels checks that the planner's varlen
// constants are the kernels' own (kernels_src/varlen.cuh): the block size,
// the most splits, and the split model the kernels apply to each row tile
// (dispatch.VarlenModelSplits), which must choose as the planner does.
func TestVarlenConstantsMatchKernels(t *testing.T) {
	src, err := os.ReadFile("kernels_src/varlen.cuh")
	require.NoError(t, err)
	got := map[string]int{}
	for _, m := range regexp.MustCompile(`constexpr int (kVarlen\w+) = (\d+);`).FindAllStringSubmatch(string(src), -1) {
		got[m[1]], err = strconv.Atoi(m[2])
		require.NoError(t, err)
	}
	for name, want := range map[string]int{
		"kVarlenThreads":       dispatch.VarlenThreads,
		"kVarlenMaxSplits":     dispatch.VarlenMaxSplits,
		"kVarlenSplitCostKeys": dispatch.VarlenSplitCostKeys,
		"kVarlenMergeCostKeys": dispatch.VarlenMergeCostKeys,
		"kVarlenMinSplitSpan":  dispatch.VarlenMinSplitSpan,
	} {
		assert.Equal(t, want, got[name], "%s in kernels_src/varlen.cuh", name)
	}
}

// TestPlannerNamesAreEmbedded checks that every kernel the planner can name
// is an entry of the embedded PTX, and that every entry is reachable.
func TestPlannerNamesAreEmbedded(t *testing.T) {
	var embedded []string
	for name := range entryModule {
		embedded = append(embedded, name)
	}
	slices.Sort(embedded)
	planned := dispatch.KernelNames()
	slices.Sort(planned)
	assert.Equal(t, embedded, planned)
}

// TestRingSharedMemoryAligned guards the decode and qkv kernels' cp.async
// rings: their dynamic shared memory must be declared 128-byte aligned. The
// kernels' static shared memory comes first, and a ring that starts off a
// 128-byte line makes every swizzled row straddle two lines: the H200 then
// asks L2 for every K/V sector twice and the decode runs 10-20% slower
// (2026-12-02).
func TestRingSharedMemoryAligned(t *testing.T) {
	checked := 0
	for _, mod := range ptx.Modules() {
		if !strings.HasPrefix(mod, "decode_") && mod != "qkv" {
			continue
		}
		src, err := ptx.Module(mod)
		require.NoError(t, err, mod)
		for _, line := range strings.Split(string(src), "\n") {
			if strings.HasPrefix(line, ".extern .shared") {
				assert.Contains(t, line, ".align 128", "module %s: %s", mod, line)
				checked++
			}
		}
	}
	assert.GreaterOrEqual(t, checked, 9, "decode and qkv modules with dynamic shared memory")
}

// TestCacheLayoutNames pins the layouts' names, which errors and the CLI print.
func TestCacheLayoutNames(t *testing.T) {
	for l, want := range map[CacheLayout]string{LayoutFlash: "flash", LayoutXSplit: "x-split", LayoutShuffle: "shuffle", 7: "Layout(7)"} {
		assert.Equal(t, want, l.String())
	}
}
