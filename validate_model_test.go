package pagedkv

import (
	"math"
	"math/big"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pagedkv/pagedkv/driver"
)

// An independent model of what each kernel may touch, written from the
// kernel sources (kernels_src/*.cu) in math/big, so that nothing in it can
// overflow. The property tests and fuzz targets (validate_fuzz_test.go)
// check: whenever Validate accepts an argument struct, every integer the
// launcher packs for the kernel is the value the struct meant (no int32
// truncation), every value the kernel computes in int32 fits, and every byte
// the kernel may read or write lies inside the buffer the struct named.
//
// The model works from the parameters the kernel receives (the launcher's
// params method), as the kernel does: strides as received, counts as
// received, and the counts are checked to be the ones the struct set.

// region is what a kernel may touch through one pointer parameter: bytes
// [lo, hi) from the pointer it receives, which must be the named buffer's
// pointer plus at.
type region struct {
	param, field string // the params struct's field and the argument struct's buffer
	buf          Buffer
	at           *big.Int // the kernel's pointer is buf.Ptr + at
	lo, hi       *big.Int // touched bytes from the kernel's pointer; none when hi ≤ lo
	optional     bool     // the kernel tests the pointer for null and then touches nothing
	align        int64    // the widest access in bytes: the first byte touched is aligned to it
}

// kernelModel is one launch as the model sees it.
type kernelModel struct {
	params  any                 // the params struct the launcher packs
	want    map[string]*big.Int // integer parameters and the values the struct meant
	free    []string            // integer parameters taken as received (strides)
	regions []region
	int32s  map[string]*big.Int // values the kernel computes in int32
	uint32s map[string]*big.Int // values the kernel computes in uint32
}

// poolRows records in m the attention kernels' last pool row, a uint32:
// (block id · id_mul + id_add) · BlockSize + row (HeadRows in
// kernels_src/cache.cuh), whose ids reach NumBlocks·NumKVHeads in the HND
// layout and NumBlocks in the others.
func (m *kernelModel) poolRows(numBlocks, numKVHeads, blockSize int, layout CacheLayout) {
	blocks := bi(int64(numBlocks))
	if layout == LayoutHND {
		blocks = bmul(blocks, bi(int64(numKVHeads)))
	}
	if m.uint32s == nil {
		m.uint32s = map[string]*big.Int{}
	}
	m.uint32s["the last pool row ("+layout.String()+")"] = badd(bmul(blocks, bi(int64(blockSize))), bi(-1))
}

// modelFault is the fault-record pointer the models hand the launchers.
const modelFault = driver.DevicePtr(0xfa000000)

func bi(v int64) *big.Int { return big.NewInt(v) }

func badd(xs ...*big.Int) *big.Int {
	s := new(big.Int)
	for _, x := range xs {
		s.Add(s, x)
	}
	return s
}

func bmul(xs ...*big.Int) *big.Int {
	p := bi(1)
	for _, x := range xs {
		p.Mul(p, x)
	}
	return p
}

func bmax(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return b
}

func bmin(a, b *big.Int) *big.Int {
	if a.Cmp(b) <= 0 {
		return a
	}
	return b
}

// bitsLog2 is log2 of a power of two, as the struct means it.
func bitsLog2(v int) *big.Int { return bi(int64(big.NewInt(int64(v)).BitLen() - 1)) }

func empty() (lo, hi *big.Int) { return bi(0), bi(0) }

// ax is one strided dimension in the model: n items step elements apart.
type ax struct{ n, step *big.Int }

func axi(n, step int64) ax { return ax{bi(n), bi(step)} }

// strided returns the bytes touched by rows of elements [rowLo, rowHi) of
// esize bytes at every index of axes: the corners of the index box give the
// least and the largest element.
func strided(esize, rowLo, rowHi int64, axes ...ax) (lo, hi *big.Int) {
	if rowHi <= rowLo {
		return empty()
	}
	lo, hi = bi(rowLo), bi(rowHi)
	for _, a := range axes {
		if a.n.Sign() <= 0 {
			return empty()
		}
		term := bmul(new(big.Int).Sub(a.n, bi(1)), a.step)
		if term.Sign() < 0 {
			lo.Add(lo, term)
		} else {
			hi.Add(hi, term)
		}
	}
	return lo.Mul(lo, bi(esize)), hi.Mul(hi, bi(esize))
}

// span is a contiguous range [lo, hi) of items of esize bytes.
func span(esize int64, lo, hi *big.Int) (*big.Int, *big.Int) {
	if hi.Cmp(lo) <= 0 {
		return empty()
	}
	return bmul(lo, bi(esize)), bmul(hi, bi(esize))
}

// pieces returns the element offsets 8c of a row's pieces c < n: all of
// them for a short row, else the first and last two (the extremes are what
// the models need).
func pieces(n int64) []int64 {
	if n <= 0 {
		return nil
	}
	if n <= 64 {
		out := make([]int64, n)
		for c := range out {
			out[c] = 8 * int64(c)
		}
		return out
	}
	return []int64{0, 8, 8 * (n - 2), 8 * (n - 1)}
}

// cachePlace is cache_place of kernels_src/cache.cuh: the element index of
// element d of head h of slot in the K (value false) or V cache of layout,
// and the element stride between d and d+1.
func cachePlace(layout int64, value bool, slot, h, d, heads, dim, bsLog2, x int64) (at, stride *big.Int) {
	s, hh, dd, H, D, X := bi(slot), bi(h), bi(d), bi(heads), bi(dim), bi(x)
	if layout == int64(LayoutFlash) {
		return badd(bmul(badd(bmul(s, H), hh), D), dd), bi(1)
	}
	bs := new(big.Int).Lsh(bi(1), uint(bsLog2))
	b := new(big.Int).Rsh(s, uint(bsLog2))
	o := new(big.Int).And(s, new(big.Int).Sub(bs, bi(1)))
	bh := badd(bmul(b, H), hh)
	if layout == int64(LayoutHND) {
		// ((b·H + h)·bs + o)·D + d
		return badd(bmul(badd(bmul(bh, bs), o), D), dd), bi(1)
	}
	if !value {
		// (((b·H + h)·(D/X) + d/X)·bs + o)·X + d%X
		at := badd(bmul(badd(bmul(badd(bmul(bh, new(big.Int).Quo(D, X)), new(big.Int).Quo(dd, X)), bs), o), X), new(big.Int).Rem(dd, X))
		return at, bi(1)
	}
	if layout == int64(LayoutXSplit) {
		return badd(bmul(badd(bmul(bh, D), dd), bs), o), bs
	}
	// (((b·H + h)·(bs/X) + o/X)·D + d)·X + o%X
	at = badd(bmul(badd(bmul(badd(bmul(bh, new(big.Int).Quo(bs, X)), new(big.Int).Quo(o, X)), D), dd), X), new(big.Int).Rem(o, X))
	return at, X
}

// cacheRange returns the bytes of a paged cache that writes (or reads) of
// 8-element pieces d < dReach of every head of every slot below numSlots
// may touch: the slots and heads at the extremes, every piece, every one of
// its 8 elements.
func cacheRange(layout int64, value bool, numSlots, heads, dim, dReach, bsLog2, csize int64) (lo, hi *big.Int) {
	if numSlots <= 0 || heads <= 0 || dReach <= 0 || csize <= 0 || bsLog2 < 0 || bsLog2 > 62 {
		return empty()
	}
	x := 16 / csize
	bs := int64(1) << bsLog2
	var slots []int64
	for _, s := range []int64{0, bs - 1, numSlots - bs, numSlots - 1} {
		if s >= 0 && s < numSlots {
			slots = append(slots, s)
		}
	}
	var minAt, maxAt *big.Int
	for _, s := range slots {
		for _, h := range []int64{0, heads - 1} {
			for _, d := range pieces(dReach / 8) {
				at, stride := cachePlace(layout, value, s, h, d, heads, dim, bsLog2, x)
				last := badd(at, bmul(bi(7), stride))
				first := bmin(at, last)
				last = bmax(at, last)
				if minAt == nil || first.Cmp(minAt) < 0 {
					minAt = first
				}
				if maxAt == nil || last.Cmp(maxAt) > 0 {
					maxAt = last
				}
			}
		}
	}
	if minAt == nil {
		return empty()
	}
	return span(csize, minAt, badd(maxAt, bi(1)))
}

// rotateReach models rotate8 (kernels_src/rope.cuh) over every piece of a
// head of dim elements with rot angles: the elements read from the source
// and written to the output are [0, elems), the angles read from a cos/sin
// row are [angleLo, angleHi).
func rotateReach(dim, rot int64, neox bool) (elems, angleLo, angleHi *big.Int) {
	half := dim >> 1
	n := dim / 8
	if neox {
		n = half / 8
	}
	elems, angleLo, angleHi = bi(0), bi(0), bi(0)
	first := true
	note := func(i int64) {
		v := bi(i)
		if first || v.Cmp(angleLo) < 0 {
			angleLo = v
		}
		if first || v.Cmp(angleHi) >= 0 {
			angleHi = badd(v, bi(1))
		}
		first = false
	}
	for _, ea := range pieces(n) {
		c := ea / 8
		if neox {
			eb := ea + half
			elems = bmax(elems, bi(max(ea, eb)+8))
			c1, c2 := c*8, c*8
			if rot == dim {
				c1, c2 = ea, eb
			}
			for _, base := range []int64{c1, c2} {
				for _, e := range []int64{0, 7} {
					note(base + e)
					note(base + rot + e)
				}
			}
			continue
		}
		elems = bmax(elems, bi(ea+8))
		for p := int64(0); p < 4; p++ {
			ca, cb := (ea>>1)+p, (ea>>1)+p
			if rot == dim {
				ca, cb = ea+2*p, ea+2*p+1
			}
			for _, i := range []int64{ca, cb} {
				note(i)
				note(rot + i)
			}
		}
	}
	return elems, angleLo, angleHi
}

// checkModel checks the launch m models against the argument struct it was
// made from (whose Validate passed).
func checkModel(t *testing.T, m kernelModel) {
	t.Helper()
	v := reflect.ValueOf(m.params)
	byParam := map[string]region{}
	for _, r := range m.regions {
		byParam[r.param] = r
	}
	seen := map[string]bool{}
	for i := range v.NumField() {
		f, fv := v.Type().Field(i), v.Field(i)
		seen[f.Name] = true
		switch {
		case f.Type == reflect.TypeFor[driver.DevicePtr]():
			got := uint64(fv.Uint())
			if f.Name == "Fault" {
				assert.Equal(t, uint64(modelFault), got, "Fault")
				continue
			}
			r, ok := byParam[f.Name]
			if !ok {
				assert.Zero(t, got, "%s: a pointer the model does not know is left for the launch to fill", f.Name)
				continue
			}
			want := uint64(0)
			if r.buf.Ptr != 0 {
				want = uint64(r.buf.Ptr) + r.at.Uint64()
			}
			assert.Equal(t, want, got, "%s: the kernel's pointer is %s plus %s", f.Name, r.field, r.at)
		case f.Type.Kind() == reflect.Int32 || f.Type.Kind() == reflect.Int64:
			if contains(m.free, f.Name) {
				continue
			}
			want, ok := m.want[f.Name]
			if !assert.True(t, ok, "the model has no value for parameter %s", f.Name) {
				continue
			}
			assert.Equal(t, want.String(), bi(fv.Int()).String(), "parameter %s (%s) is not the value the arguments meant", f.Name, f.Type)
		case f.Type.Kind() == reflect.Float32:
		default:
			t.Errorf("parameter %s has a type (%s) the model does not know", f.Name, f.Type)
		}
	}
	for name := range m.want {
		assert.True(t, seen[name], "the model names a parameter %s the kernel lacks", name)
	}
	for _, r := range m.regions {
		assert.True(t, seen[r.param], "the model names a pointer %s the kernel lacks", r.param)
		if r.hi.Cmp(r.lo) <= 0 || (r.optional && r.buf.Ptr == 0) {
			continue
		}
		if !assert.NotZero(t, r.buf.Ptr, "%s: the kernel touches bytes [%s, %s) of a null pointer", r.field, r.lo, r.hi) {
			continue
		}
		first, end := badd(r.at, r.lo), badd(r.at, r.hi)
		assert.True(t, first.Sign() >= 0, "%s: the kernel touches byte %s before the buffer", r.field, first)
		assert.True(t, end.Cmp(bi(r.buf.Bytes)) <= 0, "%s: the kernel touches bytes up to %s of a buffer of %d", r.field, end, r.buf.Bytes)
		top := badd(bi(int64(r.buf.Ptr)), end)
		assert.True(t, top.BitLen() <= 64, "%s: the kernel's addresses wrap past 2^64", r.field)
		if r.align > 1 {
			start := badd(bi(int64(r.buf.Ptr)), first)
			assert.Zero(t, new(big.Int).Rem(start, bi(r.align)).Sign(), "%s: the first access at %#x is not %d-byte aligned", r.field, start, r.align)
		}
	}
	for name, v := range m.int32s {
		assert.True(t, v.Cmp(bi(math.MinInt32)) >= 0 && v.Cmp(bi(math.MaxInt32)) <= 0, "the kernel's int32 %s = %s overflows", name, v)
	}
	for name, v := range m.uint32s {
		assert.True(t, v.Sign() >= 0 && v.Cmp(bi(math.MaxUint32)) <= 0, "the kernel's uint32 %s = %s overflows", name, v)
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// reg builds a region of the argument buffer field, received as param.
func reg(param, field string, buf Buffer, lo, hi *big.Int, align int64) region {
	return region{param: param, field: field, buf: buf, at: bi(0), lo: lo, hi: hi, align: align}
}

func opt(r region) region { r.optional = true; return r }

// inSize and cacheSize are the element sizes of the kernel the launcher
// picks for a dtype (8 for the element of an unsupported one: the struct
// fails validation, and the model only sizes buffers for it).
func elemSize(d DType) int64 {
	if s := d.Size(); s > 0 {
		return int64(s)
	}
	return 8
}

func appendModel(a *AppendArgs) kernelModel {
	p := a.params(modelFault)
	in, cs := elemSize(a.DType), elemSize(a.CacheDType)
	T, H, D := int64(p.NumTokens), int64(p.NumKVHeads), int64(p.HeadDim)
	row := (D >> 3) * 8
	m := kernelModel{
		params: p,
		want: map[string]*big.Int{
			"NumTokens": bi(int64(a.NumTokens)), "NumKVHeads": bi(int64(a.NumKVHeads)), "HeadDim": bi(int64(a.HeadDim)),
			"NumSlots": bmul(bi(int64(a.NumBlocks)), bi(int64(a.BlockSize))), "NumRemap": bi(a.SlotRemap.Bytes / 8),
			"Layout": bi(int64(a.Layout)), "BlockSizeLog2": bitsLog2(a.BlockSize),
		},
		free:   []string{"KTokenStride", "KHeadStride", "VTokenStride", "VHeadStride"},
		int32s: map[string]*big.Int{"NumKVHeads·HeadDim/8": bmul(bi(H), bi(D>>3))},
	}
	klo, khi := strided(in, 0, row, axi(T, p.KTokenStride), axi(H, p.KHeadStride))
	vlo, vhi := strided(in, 0, row, axi(T, p.VTokenStride), axi(H, p.VHeadStride))
	slo, shi := span(8, bi(0), bi(T))
	rlo, rhi := span(8, bi(0), bi(p.NumRemap))
	kclo, kchi := cacheRange(int64(p.Layout), false, p.NumSlots, H, D, row, int64(p.BlockSizeLog2), cs)
	vclo, vchi := cacheRange(int64(p.Layout), true, p.NumSlots, H, D, row, int64(p.BlockSizeLog2), cs)
	m.regions = []region{
		reg("K", "K", a.K, klo, khi, 16),
		reg("V", "V", a.V, vlo, vhi, 16),
		reg("SlotMapping", "SlotMapping", a.SlotMapping, slo, shi, 8),
		opt(reg("SlotRemap", "SlotRemap", a.SlotRemap, rlo, rhi, 8)),
		reg("KCache", "KCache", a.KCache, kclo, kchi, 8*cs),
		reg("VCache", "VCache", a.VCache, vclo, vchi, cs),
	}
	return m
}

func gatherModel(a *GatherArgs) kernelModel {
	p := a.params(modelFault)
	cs := elemSize(a.CacheDType)
	T, H, D := int64(p.NumTokens), int64(p.NumKVHeads), int64(p.HeadDim)
	row := (D >> 3) * 8
	m := kernelModel{
		params: p,
		want: map[string]*big.Int{
			"NumTokens": bi(int64(a.NumTokens)), "NumKVHeads": bi(int64(a.NumKVHeads)), "HeadDim": bi(int64(a.HeadDim)),
			"NumSlots": bmul(bi(int64(a.NumBlocks)), bi(int64(a.BlockSize))),
			"Layout":   bi(int64(a.Layout)), "BlockSizeLog2": bitsLog2(a.BlockSize),
		},
		int32s: map[string]*big.Int{"NumKVHeads·HeadDim/8": bmul(bi(H), bi(D>>3))},
	}
	olo, ohi := strided(cs, 0, row, ax{bi(T), bmul(bi(H), bi(D))}, axi(H, D))
	slo, shi := span(8, bi(0), bi(T))
	kclo, kchi := cacheRange(int64(p.Layout), false, p.NumSlots, H, D, row, int64(p.BlockSizeLog2), cs)
	vclo, vchi := cacheRange(int64(p.Layout), true, p.NumSlots, H, D, row, int64(p.BlockSizeLog2), cs)
	m.regions = []region{
		reg("KOut", "KOut", a.KOut, olo, ohi, 8*cs),
		reg("VOut", "VOut", a.VOut, olo, ohi, 8*cs),
		reg("SlotMapping", "SlotMapping", a.SlotMapping, slo, shi, 8),
		reg("KCache", "KCache", a.KCache, kclo, kchi, cs),
		reg("VCache", "VCache", a.VCache, vclo, vchi, cs),
	}
	return m
}

func ropeModel(a *RopeCacheArgs) kernelModel {
	p := a.params(modelFault)
	in, cs := elemSize(a.DType), elemSize(a.CacheDType)
	T, KVT := int64(p.NumTokens), int64(p.NumKVTokens)
	HQ, HK, D := int64(p.NumQHeads), int64(p.NumKVHeads), int64(p.HeadDim)
	neox := p.NeoX != 0
	rotated := max(min(T, KVT), 0) // the grid is KVT tokens; the first T rotate
	row := (D >> 3) * 8
	elems, angLo, angHi := rotateReach(D, int64(p.RotDim), neox)
	reach := elems.Int64()
	kvTokens := a.NumKVTokens
	if kvTokens == 0 {
		kvTokens = a.NumTokens
	}
	neoxWant := int64(0)
	if a.NeoX {
		neoxWant = 1
	}
	chunksPerHead := D / 8
	if neox {
		chunksPerHead = (D >> 1) / 8
	}
	m := kernelModel{
		params: p,
		want: map[string]*big.Int{
			"MaxPos": bi(int64(a.MaxPos)), "RotDim": bi(int64(a.RotDim)), "NumRemap": bi(a.SlotRemap.Bytes / 8),
			"NumSlots":  bmul(bi(int64(a.NumBlocks)), bi(int64(a.BlockSize))),
			"NumTokens": bi(int64(a.NumTokens)), "NumKVTokens": bi(int64(kvTokens)), "NumQHeads": bi(int64(a.NumQHeads)),
			"NumKVHeads": bi(int64(a.NumKVHeads)), "HeadDim": bi(int64(a.HeadDim)),
			"NeoX": bi(neoxWant), "Layout": bi(int64(a.Layout)), "BlockSizeLog2": bitsLog2(a.BlockSize),
		},
		free: []string{"QTokenStride", "QHeadStride", "KTokenStride", "KHeadStride", "VTokenStride", "VHeadStride"},
		int32s: map[string]*big.Int{
			"(NumQHeads+NumKVHeads)·chunks": bmul(badd(bi(HQ), bi(HK)), bi(chunksPerHead)),
			"NumKVHeads·HeadDim/8":          bmul(bi(HK), bi(D>>3)),
		},
	}
	qlo, qhi := strided(in, 0, reach, axi(rotated, p.QTokenStride), axi(HQ, p.QHeadStride))
	klo, khi := strided(in, 0, max(reach, row), axi(KVT, p.KTokenStride), axi(HK, p.KHeadStride))
	vlo, vhi := strided(in, 0, row, axi(KVT, p.VTokenStride), axi(HK, p.VHeadStride))
	qolo, qohi := strided(in, 0, reach, ax{bi(rotated), bmul(bi(HQ), bi(D))}, axi(HQ, D))
	kolo, kohi := strided(in, 0, reach, ax{bi(rotated), bmul(bi(HK), bi(D))}, axi(HK, D))
	plo, phi := span(8, bi(0), bi(rotated))
	var clo, chi *big.Int
	if rotated > 0 && p.MaxPos > 0 && angHi.Cmp(angLo) > 0 {
		last := bmul(bi(p.MaxPos-1), bi(2), bi(int64(p.RotDim)))
		clo, chi = span(4, badd(bmin(bi(0), last), angLo), badd(bmax(bi(0), last), angHi))
	} else {
		clo, chi = empty()
	}
	slo, shi := span(8, bi(0), bi(KVT))
	rlo, rhi := span(8, bi(0), bi(p.NumRemap))
	kclo, kchi := cacheRange(int64(p.Layout), false, p.NumSlots, HK, D, max(reach, row), int64(p.BlockSizeLog2), cs)
	vclo, vchi := cacheRange(int64(p.Layout), true, p.NumSlots, HK, D, row, int64(p.BlockSizeLog2), cs)
	m.regions = []region{
		reg("Q", "Q", a.Q, qlo, qhi, 16),
		reg("K", "K", a.K, klo, khi, 16),
		reg("V", "V", a.V, vlo, vhi, 16),
		reg("QOut", "QOut", a.QOut, qolo, qohi, 16),
		reg("KOut", "KOut", a.KOut, kolo, kohi, 16),
		opt(reg("ZerosOut", "ZerosOut", a.ZerosOut, qolo, qohi, 16)),
		reg("KCache", "KCache", a.KCache, kclo, kchi, 8*cs),
		reg("VCache", "VCache", a.VCache, vclo, vchi, cs),
		reg("Positions", "Positions", a.Positions, plo, phi, 8),
		opt(reg("PositionDeltas", "PositionDeltas", a.PositionDeltas, plo, phi, 8)),
		reg("CosSin", "CosSin", a.CosSin, clo, chi, 4),
		reg("SlotMapping", "SlotMapping", a.SlotMapping, slo, shi, 8),
		opt(reg("SlotRemap", "SlotRemap", a.SlotRemap, rlo, rhi, 8)),
	}
	return m
}

func qkvModel(a *QKVNormRopeArgs) kernelModel {
	p := a.params(modelFault)
	in, cs := elemSize(a.DType), elemSize(a.CacheDType)
	T, S := int64(p.NumTokens), int64(p.NumSeqs)
	HQ, HK, D := int64(p.NumQHeads), int64(p.NumKVHeads), int64(p.HeadDim)
	rot := int64(p.RotDim)
	upr := D >> 4
	uprLog2 := int64(0)
	if upr > 0 {
		uprLog2 = int64(bi(upr).TrailingZeroBits())
	}
	heads := HQ + 2*HK
	// A lane's unit holds elements d..d+7 and D/2+d..+7, d = 8·(lane mod upr).
	headReach := (upr-1)*8 + (D >> 1) + 8
	neoxWant := int64(0)
	if a.NeoX {
		neoxWant = 1
	}
	m := kernelModel{
		params: p,
		want: map[string]*big.Int{
			"MaxPos": bi(int64(a.MaxPos)), "RotDim": bi(int64(a.RotDim)), "NumTokens": bi(int64(a.NumTokens)),
			"NumSeqs": bi(int64(a.NumSeqs)), "NumQHeads": bi(int64(a.NumQHeads)), "NumKVHeads": bi(int64(a.NumKVHeads)),
			"HeadDim": bi(int64(a.HeadDim)), "MaxBlocksPerSeq": bi(int64(a.MaxBlocksPerSeq)),
			"BlockSizeLog2": bitsLog2(a.BlockSize), "NumBlocks": bi(int64(a.NumBlocks)), "Norm": bi(int64(a.Norm)),
			"NeoX": bi(neoxWant), "Layout": bi(int64(a.Layout)),
		},
		// TileTokens is the plan's (QKVNormRope sets it after params):
		// a chunk of slots the kernel stages, not an address.
		free: []string{"QKVTokenStride", "TileTokens"},
		int32s: map[string]*big.Int{
			"units":                    new(big.Int).Lsh(bi(heads), uint(uprLog2)),
			"NumQHeads+NumKVHeads":     badd(bi(HQ), bi(HK)),
			"MaxBlocksPerSeq":          bi(int64(p.MaxBlocksPerSeq)),
			"(NumQHeads+2·KV)·HeadDim": bmul(bi(heads), bi(D)),
		},
	}
	var qkvLo, qkvHi *big.Int
	if upr > 0 && heads > 0 {
		qkvLo, qkvHi = strided(in, 0, (heads-1)*D+headReach, axi(T, p.QKVTokenStride))
	} else {
		qkvLo, qkvHi = empty()
	}
	qoLo, qoHi := empty()
	if upr > 0 {
		qoLo, qoHi = strided(in, 0, headReach, ax{bi(T), bmul(bi(HQ), bi(D))}, axi(HQ, D))
	}
	// K and V pieces d and D/2+d of every head of every slot, in the layout.
	slots := clampInt64(new(big.Int).Lsh(bi(p.NumBlocks), uint(max(p.BlockSizeLog2, 0))))
	kLo, kHi := empty()
	vLo, vHi := empty()
	if upr > 0 && T > 0 {
		kLo, kHi = cacheRange(int64(p.Layout), false, slots, HK, D, headReach, int64(p.BlockSizeLog2), cs)
		vLo, vHi = cacheRange(int64(p.Layout), true, slots, HK, D, headReach, int64(p.BlockSizeLog2), cs)
	}
	vAlign := 8 * cs // 16-byte pieces, or element by element where V is token-minor
	if a.Layout.Laid() {
		vAlign = cs
	}
	// Table rows: 2·rot floats (rot cosines, rot sines) at pos·2·rot, pos < MaxPos.
	tLo, tHi := empty()
	if T > 0 && p.MaxPos > 0 && rot > 0 {
		tLo, tHi = span(4, bi(0), badd(bmul(bi(p.MaxPos-1), bi(2*rot)), bi(2*rot)))
	}
	seqs := int64(1) // without cu_seqlens every token is sequence 0
	if a.CuSeqlensQ.Ptr != 0 {
		seqs = S
	}
	poLo, poHi := empty()
	cuLo, cuHi := empty()
	btLo, btHi := empty()
	if T > 0 {
		poLo, poHi = span(4, bi(0), bi(seqs))
		cuLo, cuHi = span(4, bi(0), bi(S+1))
		btLo, btHi = span(4, bi(0), bmul(bi(seqs), bi(int64(p.MaxBlocksPerSeq))))
	}
	wLo, wHi := empty()
	if p.Norm != 0 && T > 0 && upr > 0 {
		wLo, wHi = span(in, bi(0), bi(headReach))
	}
	m.regions = []region{
		reg("QKV", "QKV", a.QKV, qkvLo, qkvHi, 16),
		reg("QOut", "QOut", a.QOut, qoLo, qoHi, 16),
		reg("KCache", "KCache", a.KCache, kLo, kHi, 8*cs),
		reg("VCache", "VCache", a.VCache, vLo, vHi, vAlign),
		opt(reg("CuSeqlens", "CuSeqlensQ", a.CuSeqlensQ, cuLo, cuHi, 4)),
		reg("PosOffsets", "PosOffsets", a.PosOffsets, poLo, poHi, 4),
		reg("BlockTables", "BlockTables", a.BlockTables, btLo, btHi, 4),
		reg("QWeight", "QNormWeight", a.QNormWeight, wLo, wHi, 16),
		reg("KWeight", "KNormWeight", a.KNormWeight, wLo, wHi, 16),
		reg("CosSin", "CosSin", a.CosSin, tLo, tHi, 4),
	}
	return m
}

func mlaModel(a *MLARopeQuantArgs) kernelModel {
	p := a.params(modelFault)
	in := elemSize(a.DType)
	T, NH, NKV := int64(p.NumTokens), int64(p.NumQHeads), int64(p.NumKVHeads)
	lora, rope, rot := int64(p.LoraRank), int64(p.RopeDim), int64(p.RotDim)
	neox := p.NeoX != 0
	nope := (lora >> 3) * 8
	elems, angLo, angHi := rotateReach(rope, rot, neox)
	reach := elems.Int64()
	cph := rope / 8
	if neox {
		cph = (rope >> 1) / 8
	}
	neoxWant := int64(0)
	if a.NeoX {
		neoxWant = 1
	}
	m := kernelModel{
		params: p,
		want: map[string]*big.Int{
			"MaxPos": bi(int64(a.MaxPos)), "RotDim": bi(int64(a.RotDim)), "NumTokens": bi(int64(a.NumTokens)),
			"NumQHeads": bi(int64(a.NumQHeads)), "NumKVHeads": bi(int64(a.NumKVHeads)), "LoraRank": bi(int64(a.LoraRank)),
			"RopeDim": bi(int64(a.RopeDim)), "NeoX": bi(neoxWant),
		},
		free: []string{"QNopeTokenStride", "QNopeHeadStride", "QRopeTokenStride", "QRopeHeadStride",
			"KNopeTokenStride", "KNopeHeadStride", "KRopeTokenStride", "KRopeHeadStride"},
		int32s: map[string]*big.Int{
			"(NumQHeads+NumKVHeads)·LoraRank/8": bmul(badd(bi(NH), bi(NKV)), bi(lora>>3)),
			"(NumQHeads+NumKVHeads)·pieces":     bmul(badd(bi(NH), bi(NKV)), bi(cph)),
			"LoraRank+RopeDim":                  badd(bi(lora), bi(rope)),
		},
	}
	qnLo, qnHi := strided(in, 0, nope, axi(T, p.QNopeTokenStride), axi(NH, p.QNopeHeadStride))
	qrLo, qrHi := strided(in, 0, reach, axi(T, p.QRopeTokenStride), axi(NH, p.QRopeHeadStride))
	knLo, knHi := strided(in, 0, nope, axi(T, p.KNopeTokenStride), axi(NKV, p.KNopeHeadStride))
	krLo, krHi := strided(in, 0, reach, axi(T, p.KRopeTokenStride), axi(NKV, p.KRopeHeadStride))
	qRow := nope
	if reach > 0 {
		qRow = max(qRow, lora+reach)
	}
	qoLo, qoHi := strided(1, 0, qRow, ax{bi(T), bmul(bi(NH), bi(lora+rope))}, axi(NH, lora+rope))
	knoLo, knoHi := strided(1, 0, nope, ax{bi(T), bmul(bi(NKV), bi(lora))}, axi(NKV, lora))
	kroLo, kroHi := strided(1, 0, reach, ax{bi(T), bmul(bi(NKV), bi(rope))}, axi(NKV, rope))
	pLo, pHi := span(8, bi(0), bi(T))
	cLo, cHi := empty()
	if T > 0 && p.MaxPos > 0 && angHi.Cmp(angLo) > 0 {
		last := bmul(bi(p.MaxPos-1), bi(2), bi(rot))
		cLo, cHi = span(4, badd(bmin(bi(0), last), angLo), badd(bmax(bi(0), last), angHi))
	}
	m.regions = []region{
		reg("QNope", "QNope", a.QNope, qnLo, qnHi, 16),
		reg("QRope", "QRope", a.QRope, qrLo, qrHi, 16),
		reg("KNope", "KNope", a.KNope, knLo, knHi, 16),
		reg("KRope", "KRope", a.KRope, krLo, krHi, 16),
		reg("QOut", "QOut", a.QOut, qoLo, qoHi, 8),
		reg("KNopeOut", "KNopeOut", a.KNopeOut, knoLo, knoHi, 8),
		reg("KRopeOut", "KRopeOut", a.KRopeOut, kroLo, kroHi, 8),
		reg("Positions", "Positions", a.Positions, pLo, pHi, 8),
		reg("CosSin", "CosSin", a.CosSin, cLo, cHi, 4),
	}
	return m
}

func concatModel(a *MLAConcatQArgs) kernelModel {
	p := a.params()
	in := elemSize(a.DType)
	T, NH := int64(p.NumTokens), int64(p.NumQHeads)
	lora, rope := int64(p.LoraRank), int64(p.RopeDim)
	ph8 := ((lora + rope) >> 3) * 8 // the pieces d = 0, 8, … < ph8 of a head
	m := kernelModel{
		params: p,
		want: map[string]*big.Int{
			"NumTokens": bi(int64(a.NumTokens)), "NumQHeads": bi(int64(a.NumQHeads)),
			"LoraRank": bi(int64(a.LoraRank)), "RopeDim": bi(int64(a.RopeDim)),
		},
		free:   []string{"QNopeTokenStride", "QNopeHeadStride", "QRopeTokenStride", "QRopeHeadStride"},
		int32s: map[string]*big.Int{"NumQHeads·(LoraRank+RopeDim)/8": bmul(bi(NH), bi((lora+rope)>>3))},
	}
	// Pieces d < LoraRank come from QNope at d, the rest from QRope at d − LoraRank.
	nopeEnd := min(lora, ph8)
	qnLo, qnHi := empty()
	if nopeEnd > 0 {
		qnLo, qnHi = strided(in, 0, (nopeEnd-1)/8*8+8, axi(T, p.QNopeTokenStride), axi(NH, p.QNopeHeadStride))
	}
	qrLo, qrHi := empty()
	if first := (max(lora, 0) + 7) / 8 * 8; first < ph8 {
		qrLo, qrHi = strided(in, first-lora, ph8-lora, axi(T, p.QRopeTokenStride), axi(NH, p.QRopeHeadStride))
	}
	oLo, oHi := strided(in, 0, ph8, ax{bi(T), bmul(bi(NH), bi(lora+rope))}, axi(NH, lora+rope))
	m.regions = []region{
		reg("QNope", "QNope", a.QNope, qnLo, qnHi, 16),
		reg("QRope", "QRope", a.QRope, qrLo, qrHi, 16),
		reg("Out", "Out", a.Out, oLo, oHi, 16),
	}
	return m
}

func decodeModel(a *DecodeArgs) kernelModel {
	p := a.params(modelFault, batchView{})
	in, cs := elemSize(a.DType), elemSize(a.CacheDType)
	// The grid: NumKVHeads × NumSeqs (× splits); a balanced launch's work
	// items name sequences below NumSeqs (checkDecodePlan holds plans to it).
	S, HK := int64(a.NumSeqs), int64(a.NumKVHeads)
	HQ, D := int64(p.NumQHeads), int64(a.HeadDim)
	G := int64(0)
	if HK > 0 {
		G = HQ / HK
	}
	bsLog := int64(p.BlockSizeLog2)
	mbps := int64(p.MaxBlocksPerSeq)
	m := kernelModel{
		params: p,
		want: map[string]*big.Int{
			"NumQHeads": bi(int64(a.NumQHeads)), "MaxBlocksPerSeq": bi(int64(a.MaxBlocksPerSeq)),
			"BlockSizeLog2": bitsLog2(a.BlockSize), "NumBlocks": bi(int64(a.NumBlocks)),
			"Layout": bi(int64(a.Layout)), "KVBias": bi(0),
		},
		free:   []string{"QTokenStride"},
		int32s: map[string]*big.Int{"kvh·G+g": bmul(bi(HK), bi(G)), "G·HeadDim": bmul(bi(G), bi(D))},
	}
	m.poolRows(a.NumBlocks, a.NumKVHeads, a.BlockSize, a.Layout)
	if bsLog >= 0 && bsLog < 32 {
		m.int32s["cap"] = new(big.Int).Lsh(bi(mbps), uint(bsLog))
		// Every split count the kernels take: the end of the last split
		// (splits·⌈pages/splits⌉ pages) and the guessed start plus one
		// tile of every warp (raw_id), both in int32.
		for splits := int64(1); splits <= 64; splits++ {
			chunk := (mbps + splits - 1) / splits
			m.int32s["split end, "+itoa(int(splits))+" splits"] = new(big.Int).Lsh(bmul(bi(splits), bi(chunk)), uint(bsLog))
			m.int32s["guess+tiles, "+itoa(int(splits))+" splits"] = badd(new(big.Int).Lsh(bmul(bi(splits-1), bi(chunk)), uint(bsLog)), bi(127))
		}
	}
	qLo, qHi := strided(in, 0, HK*G*D, axi(S, p.QTokenStride))
	// Every element of every head of every slot, in the layout.
	slots := clampInt64(bmul(bi(p.NumBlocks), new(big.Int).Lsh(bi(1), uint(max(bsLog, 0)))))
	kLo, kHi := cacheRange(int64(p.Layout), false, slots, HK, D, D, bsLog, cs)
	vLo, vHi := cacheRange(int64(p.Layout), true, slots, HK, D, D, bsLog, cs)
	tLo, tHi := span(4, bi(0), bmul(bi(S), bi(mbps)))
	lLo, lHi := span(4, bi(0), bi(S))
	rows := func(esize, row int64) (*big.Int, *big.Int) {
		return strided(esize, 0, row, ax{bi(S), bmul(bi(HQ), bi(row))}, ax{bi(HK), bmul(bi(G), bi(row))}, axi(G, row))
	}
	oLo, oHi := rows(in, D)
	seLo, seHi := rows(4, 1)
	m.regions = []region{
		reg("Q", "Q", a.Q, qLo, qHi, 16),
		reg("KCache", "KCache", a.KCache, kLo, kHi, 16),
		reg("VCache", "VCache", a.VCache, vLo, vHi, 16),
		reg("BlockTables", "BlockTables", a.BlockTables, tLo, tHi, 4),
		reg("KVLens", "KVLens", a.KVLens, lLo, lHi, 4),
		reg("Out", "Out", a.Out, oLo, oHi, in),
		opt(reg("LSE", "LSE", a.LSE, seLo, seHi, 4)),
	}
	return m
}

// varlenModel models paged_varlen_* (kernels_src/varlen.cuh) and its
// split-K merge (paged_varlen_merge_*), which touches Out, LSE and
// CuSeqlensQ as the single-pass kernel does: every (token, head) row of the
// first NumTokens tokens. The split-K partials live in the scratch the
// launch fills (Workspace is checked against the plan at launch); the kernel
// reads CuSeqlensQ, PosOffsets and BlockTables itself, clamping token
// bounds into [0, NumTokens], KV lengths into [0, MaxBlocksPerSeq·
// BlockSize] and block ids into [0, NumBlocks), so the model takes the worst
// case over them: any token, any head, any slot of the pool.
func varlenModel(a *VarlenArgs) kernelModel {
	p := a.params(modelFault, batchView{})
	in, cs := elemSize(a.DType), elemSize(a.CacheDType)
	// The grid: NumSeqs + ⌊TotalQ·G/R⌋ row tiles × NumKVHeads (× splits);
	// a batch without query tokens launches nothing.
	S, HK := int64(p.NumSeqs), int64(a.NumKVHeads)
	T, HQ, D := int64(p.TotalQ), int64(p.NumQHeads), int64(a.HeadDim)
	G := int64(0)
	if HK > 0 {
		G = HQ / HK
	}
	bsLog := int64(p.BlockSizeLog2)
	mbps := int64(p.MaxBlocksPerSeq)
	causal := int64(0)
	if a.Causal {
		causal = 1
	}
	m := kernelModel{
		params: p,
		want: map[string]*big.Int{
			"NumSeqs": bi(int64(a.NumSeqs)), "TotalQ": bi(int64(a.NumTokens)), "NumQHeads": bi(int64(a.NumQHeads)),
			"MaxBlocksPerSeq": bi(int64(a.MaxBlocksPerSeq)), "BlockSizeLog2": bitsLog2(a.BlockSize),
			"NumBlocks": bi(int64(a.NumBlocks)), "Causal": bi(causal), "Layout": bi(int64(a.Layout)), "CuBase": bi(0), "SeqBase": bi(0), "OnePos": bi(0),
		},
		// SplitBlocks and SplitWave come from the plan; whatever their
		// values, a row tile takes from 1 to gridDim.z splits.
		free: []string{"QTokenStride", "OutTokenStride", "OutHeadStride", "SplitBlocks", "SplitWave"},
		int32s: map[string]*big.Int{
			"q_len·G (a sequence's packed rows)":     bmul(bi(T), bi(G)),
			"the merge's rows (NumTokens·NumQHeads)": bmul(bi(int64(a.NumTokens)), bi(int64(a.NumQHeads))),
			"gridDim.x (NumSeqs + ⌊TotalQ·G/64⌋)":    badd(bi(S), new(big.Int).Quo(bmul(bi(T), bi(G)), bi(64))),
		},
	}
	m.poolRows(a.NumBlocks, a.NumKVHeads, a.BlockSize, a.Layout)
	// A block's rows run from row0 to row0+R (its last row is min(row0+R,
	// q_len·G) − 1): for the last row tile, ⌈q_len·G/R⌉·R. R is 64 (the _r64
	// entries, and D = 256) or 128 (the others, D ≤ 128).
	for _, rows := range []int64{64, 128} {
		if rows == 128 && D > 128 {
			continue
		}
		end := bmul(new(big.Int).Quo(badd(bmul(bi(T), bi(G)), bi(rows-1)), bi(rows)), bi(rows))
		m.int32s["row0+R, the last row tile's end, R="+itoa(int(rows))] = end
	}
	if bsLog >= 0 && bsLog < 32 {
		capTokens := new(big.Int).Lsh(bi(mbps), uint(bsLog))
		m.int32s["cap (MaxBlocksPerSeq << BlockSizeLog2)"] = capTokens
		m.int32s["the last K/V tile's end (cap + 64 keys)"] = badd(capTokens, bi(64))
	}
	// Q: token q_begin+tok < TotalQ, head kvh·G + g, 16-byte pieces of D.
	qLo, qHi := strided(in, 0, D, axi(T, p.QTokenStride), ax{bmul(bi(HK), bi(G)), bi(D)})
	// K/V: slot (block < NumBlocks) · NumKVHeads·D + kvh·D, 16-byte pieces.
	slots := bmul(bi(p.NumBlocks), new(big.Int).Lsh(bi(1), uint(max(bsLog, 0))))
	// These four are modelled even without query tokens (then nothing is
	// launched; the model only asks for more than is touched), as Validate
	// sizes them from the shapes alone.
	cLo, cHi := strided(cs, 0, D, ax{slots, bmul(bi(HK), bi(D))}, axi(HK, D))
	tLo, tHi := span(4, bi(0), bmul(bi(S), bi(mbps)))
	cuLo, cuHi := span(4, bi(0), bi(S+1)) // cu_seqlens_q[s+1] of s < NumSeqs; the merge's [NumSeqs]
	poLo, poHi := span(4, bi(0), bi(S))
	// Out and LSE: every head below NumQHeads (the merge's rows).
	oLo, oHi := strided(in, 0, D, axi(T, p.OutTokenStride), axi(HQ, p.OutHeadStride))
	seLo, seHi := strided(4, 0, 1, axi(T, HQ), axi(HQ, 1))
	m.regions = []region{
		reg("Q", "Q", a.Q, qLo, qHi, 16),
		reg("KCache", "KCache", a.KCache, cLo, cHi, 16),
		reg("VCache", "VCache", a.VCache, cLo, cHi, 16),
		reg("BlockTables", "BlockTables", a.BlockTables, tLo, tHi, 4),
		reg("CuSeqlensQ", "CuSeqlensQ", a.CuSeqlensQ, cuLo, cuHi, 4),
		reg("PosOffsets", "PosOffsets", a.PosOffsets, poLo, poHi, 4),
		reg("Out", "Out", a.Out, oLo, oHi, 4),
		opt(reg("LSE", "LSE", a.LSE, seLo, seHi, 4)),
	}
	return m
}

func ptrAt(p uint64) driver.DevicePtr { return driver.DevicePtr(p) }
