package pagedkv

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/big"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Property tests and fuzz targets of "Validate succeeds ⇒ every byte the
// kernel may touch lies inside the named buffer" (validate_model_test.go),
// one pair per argument struct.
//
// A spec is an argument struct's numbers in a fixed-size form that the fuzz
// engine can mutate: every scalar field of the struct by name, and for each
// buffer field B a size BSize. The buffer sizes start from what the model
// says the kernel touches: BSize is added to that need, unless B's bit in
// Abs is set (then BSize is the size), or B's bit in Absent leaves the buffer
// out; Misalign moves a pointer off its alignment. Bits count the Size
// fields in order.

// specBase is the pointer of a spec's i-th buffer: 256-byte aligned, apart
// from the others.
func specBase(i int) uint64 { return 0x1000000000 * uint64(i+1) }

// exercise builds the argument struct of spec, applies prepare (what a
// spec cannot hold, such as slices), sizes its buffers from the model,
// validates it, and when Validate accepts it checks the model. It reports
// whether Validate accepted it.
func exercise[A any, P validator[A]](t *testing.T, arg string, spec any, model func(*A) kernelModel, prepare ...func(*A)) bool {
	t.Helper()
	a := new(A)
	av := reflect.ValueOf(a).Elem()
	sv := reflect.ValueOf(spec)
	var abs, absent, misalign uint64
	type sized struct {
		field string
		size  int64
	}
	var bufs []sized
	for i := range sv.NumField() {
		name, fv := sv.Type().Field(i).Name, sv.Field(i)
		if b := av.FieldByName(strings.TrimSuffix(name, "Size")); strings.HasSuffix(name, "Size") && b.IsValid() && b.Type() == reflect.TypeFor[Buffer]() {
			bufs = append(bufs, sized{strings.TrimSuffix(name, "Size"), fv.Int()})
			continue
		}
		switch name {
		case "Abs":
			abs = fv.Uint()
			continue
		case "Absent":
			absent = fv.Uint()
			continue
		case "Misalign":
			misalign = fv.Uint()
			continue
		}
		dst := av.FieldByName(name)
		require.True(t, dst.IsValid(), "%s has no field %s", arg, name)
		switch dst.Kind() {
		case reflect.Int, reflect.Int64:
			dst.SetInt(fv.Int())
		case reflect.Uint8:
			dst.SetUint(fv.Uint())
		case reflect.Float32:
			dst.SetFloat(fv.Float())
		case reflect.Bool:
			dst.SetBool(fv.Bool())
		default:
			t.Fatalf("%s.%s: a spec cannot set a %s", arg, name, dst.Type())
		}
	}
	for _, f := range prepare {
		f(a)
	}
	buf := func(i int) *Buffer { return av.FieldByName(bufs[i].field).Addr().Interface().(*Buffer) }
	for i := range bufs {
		if absent>>i&1 == 0 {
			b := Buffer{Ptr: ptrAt(specBase(i)), Bytes: 1 << 62} // room while the model finds the need
			if misalign>>i&1 == 1 {
				b.Ptr += 2
			}
			*buf(i) = b
		}
	}
	need := map[string]*big.Int{}
	for _, r := range model(a).regions {
		if r.hi.Cmp(r.lo) > 0 {
			end := badd(r.at, r.hi)
			if n, ok := need[r.field]; !ok || end.Cmp(n) > 0 {
				need[r.field] = end
			}
		}
	}
	for i, s := range bufs {
		if absent>>i&1 == 1 {
			continue
		}
		if abs>>i&1 == 1 {
			buf(i).Bytes = s.size
			continue
		}
		n := need[s.field]
		if n == nil {
			n = bi(0)
		}
		buf(i).Bytes = clampInt64(badd(n, bi(s.size)))
	}
	err := P(a).Validate()
	if err != nil {
		assert.ErrorIs(t, err, ErrInvalidArgument)
		assert.True(t, strings.HasPrefix(err.Error(), "pagedkv: "+arg), "the error names the struct: %v", err)
		return false
	}
	checkModel(t, model(a))
	return true
}

func clampInt64(v *big.Int) int64 {
	switch {
	case v.Cmp(bi(math.MaxInt64)) > 0:
		return math.MaxInt64
	case v.Cmp(bi(math.MinInt64)) < 0:
		return math.MinInt64
	}
	return v.Int64()
}

// encodeSpec and specFrom turn a spec into the fuzz engine's bytes and
// back; short inputs are padded with zeros.
func encodeSpec(spec any) []byte {
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, spec); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func specFrom[S any](data []byte) S {
	var s S
	raw := make([]byte, binary.Size(s))
	copy(raw, data)
	if err := binary.Read(bytes.NewReader(raw), binary.LittleEndian, &s); err != nil {
		panic(err)
	}
	return s
}

// wildValues are the values the generators try where a field wants an
// ordinary one: the limits of int32 and int64 and the overflow cases.
var wildValues = []int64{
	0, -1, -8, 1, 8, 3, 1 << 16, 1<<16 + 1, 1 << 20, 1 << 30, 1<<30 + 1, 1<<31 - 1, 1 << 31, 1<<31 + 8, 1 << 32,
	1<<32 + 2, 1 << 40, 1 << 53, 1 << 56, 1 << 61, 1 << 62, math.MaxInt64, math.MinInt64,
}

type gen struct{ r *rand.Rand }

func (g gen) pick(vs ...int64) int64 { return vs[g.r.IntN(len(vs))] }

// wild returns v, or one time in 20 a wild value.
func (g gen) wild(v int64) int64 {
	if g.r.IntN(20) == 0 {
		return wildValues[g.r.IntN(len(wildValues))]
	}
	return v
}

// size returns a buffer size delta: mostly 0 (exactly the need), sometimes a
// few bytes either way, rarely a wild value.
func (g gen) size() int64 {
	switch g.r.IntN(30) {
	case 0, 1, 2:
		return int64(g.r.IntN(65)) - 32
	case 3:
		return wildValues[g.r.IntN(len(wildValues))]
	}
	return 0
}

// stride returns a stride for rows of at least min elements: contiguous (0)
// half the time, else a multiple of 8 at or above it, sometimes below.
func (g gen) stride(min int64) int64 {
	switch g.r.IntN(8) {
	case 0, 1, 2, 3:
		return 0
	case 4:
		return g.wild(min)
	case 5:
		return min + 8*int64(g.r.IntN(64))
	case 6:
		return min * int64(1+g.r.IntN(4))
	}
	return int64(8 * g.r.IntN(int(max(min/8, 1))+2))
}

// rare returns a mask with each of n bits set one time in every.
func (g gen) rare(n, every int) uint16 {
	var m uint16
	for i := range n {
		if g.r.IntN(every) == 0 {
			m |= 1 << i
		}
	}
	return m
}

func (g gen) sizes(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = g.size()
	}
	return out
}

// propertyRuns is how many random specs each property test validates.
const propertyRuns = 3000

// runProperty validates propertyRuns random specs and requires that a fair
// share of them are valid, so that the property is exercised.
func runProperty[S any, A any, P validator[A]](t *testing.T, arg string, random func(gen) S, model func(*A) kernelModel) {
	g := gen{rand.New(rand.NewPCG(12, uint64(len(arg))))}
	valid := 0
	for i := range propertyRuns {
		s := random(g)
		if exercise[A, P](t, arg, s, model) {
			valid++
		}
		if t.Failed() {
			t.Fatalf("run %d: spec %+v", i, s)
		}
	}
	t.Logf("%s: %d of %d random argument sets valid", arg, valid, propertyRuns)
	assert.Greater(t, valid, propertyRuns/10, "too few valid argument sets to exercise the property")
}

// --- DecodeArgs ---

type decodeSpec struct {
	NumSeqs, NumQHeads, NumKVHeads, HeadDim int64
	BlockSize, NumBlocks, MaxBlocksPerSeq   int64
	MaxKVLen, QTokenStride, KVCapacity      int64
	DType, CacheDType                       uint8
	Scale, KScale, VScale                   float32
	Layout                                  int64
	QSize, KCacheSize, VCacheSize           int64
	BlockTablesSize, KVLensSize             int64
	OutSize, LSESize                        int64
	Abs, Absent, Misalign                   uint16
}

func goodDecodeSpec() decodeSpec {
	return decodeSpec{NumSeqs: 4, NumQHeads: 32, NumKVHeads: 8, HeadDim: 128, BlockSize: 16, NumBlocks: 64,
		MaxBlocksPerSeq: 16, MaxKVLen: 200, DType: uint8(F16), CacheDType: uint8(F16)}
}

func randDecodeSpec(g gen) decodeSpec {
	hk := g.pick(1, 2, 4, 8)
	s := decodeSpec{
		NumSeqs: g.wild(g.pick(1, 2, 5, 9, 33, 1+int64(g.r.IntN(300)))), NumKVHeads: g.wild(hk),
		NumQHeads: g.wild(hk * g.pick(1, 2, 4, 8, 16)), HeadDim: g.wild(g.pick(64, 128, 256)),
		BlockSize: g.wild(g.pick(1, 16, 32, 256)), NumBlocks: g.wild(g.pick(1, 64, 1000)),
		MaxBlocksPerSeq: g.wild(g.pick(1, 16, 128)), DType: uint8(g.pick(int64(F16), int64(BF16))),
	}
	s.CacheDType = s.DType
	if g.r.IntN(3) == 0 {
		s.CacheDType, s.KScale, s.VScale = uint8(E4M3), 0.5, 2
	}
	s.QTokenStride = g.wild(g.stride(s.NumQHeads * s.HeadDim))
	s.MaxKVLen = g.wild(int64(g.r.IntN(int(max(min(s.MaxBlocksPerSeq*s.BlockSize, 1<<20), 0)) + 1)))
	sz := g.sizes(7)
	s.QSize, s.KCacheSize, s.VCacheSize, s.BlockTablesSize, s.KVLensSize, s.OutSize, s.LSESize = sz[0], sz[1], sz[2], sz[3], sz[4], sz[5], sz[6]
	s.Absent = uint16(g.r.IntN(2)) << 6 // LSE is optional
	s.Abs, s.Misalign = g.rare(7, 100), g.rare(7, 100)
	s.Layout = g.wild(g.pick(0, 0, 1, 2, 3))
	return s
}

// decodeSeeds are overflow cases: Q sized as a wrapping size check would
// compute it (8192 bytes: 4 sequences' worth of nothing plus one row).
func decodeSeeds() []decodeSpec {
	good := goodDecodeSpec()
	s5, s9 := good, good
	s5.NumSeqs, s5.QTokenStride, s5.QSize, s5.Abs = 5, 1<<62, 8192, 1
	s9.NumSeqs, s9.QTokenStride, s9.QSize, s9.Abs = 9, 1<<61, 8192, 1
	return []decodeSpec{good, s5, s9}
}

func TestDecodeValidateProperty(t *testing.T) {
	runProperty[decodeSpec, DecodeArgs](t, decodeArg, randDecodeSpec, decodeModel)
}

func FuzzDecodeValidate(f *testing.F) {
	for _, s := range decodeSeeds() {
		f.Add(encodeSpec(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		exercise[DecodeArgs](t, decodeArg, specFrom[decodeSpec](data), decodeModel)
	})
}

// --- AppendArgs ---

type appendSpec struct {
	NumTokens, NumKVHeads, HeadDim int64
	BlockSize, NumBlocks           int64
	KTokenStride, KHeadStride      int64
	VTokenStride, VHeadStride      int64
	Layout                         int64
	DType, CacheDType              uint8
	KScale, VScale                 float32
	KSize, VSize                   int64
	KCacheSize, VCacheSize         int64
	SlotMappingSize, SlotRemapSize int64
	Abs, Absent, Misalign          uint16
}

func goodAppendSpec() appendSpec {
	return appendSpec{NumTokens: 10, NumKVHeads: 4, HeadDim: 128, BlockSize: 16, NumBlocks: 8,
		DType: uint8(F16), CacheDType: uint8(F16), Absent: 1 << 5}
}

func randAppendSpec(g gen) appendSpec {
	s := appendSpec{
		NumTokens: g.wild(g.pick(0, 1, 2, 7, 8, 9, 16, 17, 100, int64(g.r.IntN(2000)))), NumKVHeads: g.wild(g.pick(1, 2, 8, 32)),
		HeadDim: g.wild(8 * (1 + int64(g.r.IntN(32)))), BlockSize: g.wild(g.pick(1, 8, 16, 32, 256)),
		NumBlocks: g.wild(g.pick(1, 3, 64, 1<<20)), Layout: g.wild(g.pick(0, 1, 2, 3)),
		DType: uint8(g.pick(int64(F16), int64(BF16))),
	}
	s.CacheDType = s.DType
	if g.r.IntN(3) == 0 {
		s.CacheDType, s.KScale, s.VScale = uint8(E4M3), 0.5, 2
		s.HeadDim = g.wild(16 * (1 + int64(g.r.IntN(16))))
		if s.Layout == 2 {
			s.BlockSize = g.wild(g.pick(16, 32, 256))
		}
	}
	if s.Layout == 2 && s.BlockSize < 8 {
		s.BlockSize = 16
	}
	s.KHeadStride = g.stride(s.HeadDim)
	s.KTokenStride = g.stride(s.NumKVHeads * max(s.KHeadStride, s.HeadDim))
	s.VHeadStride = g.stride(s.HeadDim)
	s.VTokenStride = g.stride(s.NumKVHeads * max(s.VHeadStride, s.HeadDim))
	sz := g.sizes(6)
	s.KSize, s.VSize, s.KCacheSize, s.VCacheSize, s.SlotMappingSize = sz[0], sz[1], sz[2], sz[3], sz[4]
	if g.r.IntN(3) == 0 { // a remap table of some entries
		s.SlotRemapSize, s.Abs = 8*int64(1+g.r.IntN(1000)), 1<<5
	} else {
		s.Absent = 1 << 5
	}
	s.Abs |= g.rare(5, 100)
	s.Misalign = g.rare(6, 100)
	return s
}

// appendSeeds are overflow cases: a stride of 2^62 with Key and Value
// sized for contiguous rows, which a wrapping size check lets through.
func appendSeeds() []appendSpec {
	good := goodAppendSpec()
	const contiguous = 10 * 4 * 128 * 2
	kt, vt, kh := good, good, good
	kt.KTokenStride, kt.KSize, kt.Abs = 1<<62, contiguous, 1
	vt.VTokenStride, vt.VSize, vt.Abs = 1<<62, contiguous, 2
	kh.KHeadStride, kh.KSize, kh.Abs = 1<<62, contiguous, 1
	return []appendSpec{good, kt, vt, kh}
}

func TestAppendValidateProperty(t *testing.T) {
	runProperty[appendSpec, AppendArgs](t, appendArg, randAppendSpec, appendModel)
}

func FuzzAppendValidate(f *testing.F) {
	for _, s := range appendSeeds() {
		f.Add(encodeSpec(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		exercise[AppendArgs](t, appendArg, specFrom[appendSpec](data), appendModel)
	})
}

// --- GatherArgs ---

type gatherSpec struct {
	NumTokens, NumKVHeads, HeadDim int64
	BlockSize, NumBlocks, Layout   int64
	CacheDType                     uint8
	KCacheSize, VCacheSize         int64
	SlotMappingSize                int64
	KOutSize, VOutSize             int64
	Abs, Absent, Misalign          uint16
}

func goodGatherSpec() gatherSpec {
	return gatherSpec{NumTokens: 10, NumKVHeads: 4, HeadDim: 128, BlockSize: 16, NumBlocks: 8,
		Layout: int64(LayoutShuffle), CacheDType: uint8(F16)}
}

func randGatherSpec(g gen) gatherSpec {
	s := gatherSpec{
		NumTokens: g.wild(g.pick(0, 1, 8, 9, 17, int64(g.r.IntN(3000)))), NumKVHeads: g.wild(g.pick(1, 2, 8)),
		HeadDim: g.wild(16 * (1 + int64(g.r.IntN(16)))), BlockSize: g.wild(g.pick(16, 32, 256)),
		NumBlocks: g.wild(g.pick(1, 5, 1<<16)), Layout: g.wild(g.pick(0, 1, 2, 3)),
		CacheDType: uint8(g.pick(int64(F16), int64(BF16), int64(E4M3))),
	}
	sz := g.sizes(5)
	s.KCacheSize, s.VCacheSize, s.SlotMappingSize, s.KOutSize, s.VOutSize = sz[0], sz[1], sz[2], sz[3], sz[4]
	s.Abs, s.Misalign = g.rare(5, 100), g.rare(5, 100)
	return s
}

func TestGatherValidateProperty(t *testing.T) {
	runProperty[gatherSpec, GatherArgs](t, gatherArg, randGatherSpec, gatherModel)
}

func FuzzGatherValidate(f *testing.F) {
	good := goodGatherSpec()
	big := good
	big.NumBlocks, big.NumKVHeads, big.HeadDim, big.BlockSize = 1<<40, 1<<16, 256, 256
	f.Add(encodeSpec(good))
	f.Add(encodeSpec(big))
	f.Fuzz(func(t *testing.T, data []byte) {
		exercise[GatherArgs](t, gatherArg, specFrom[gatherSpec](data), gatherModel)
	})
}

// --- RopeCacheArgs ---

type ropeSpec struct {
	NumTokens, NumKVTokens            int64
	NumQHeads, NumKVHeads, HeadDim    int64
	BlockSize, NumBlocks              int64
	MaxPos, RotDim                    int64
	NeoX                              bool
	QTokenStride, QHeadStride         int64
	KTokenStride, KHeadStride         int64
	VTokenStride, VHeadStride         int64
	Layout                            int64
	DType, CacheDType                 uint8
	KScale, VScale                    float32
	QSize, KSize, VSize               int64
	QOutSize, KOutSize, ZerosOutSize  int64
	KCacheSize, VCacheSize            int64
	PositionsSize, PositionDeltasSize int64
	CosSinSize                        int64
	SlotMappingSize, SlotRemapSize    int64
	Abs, Absent, Misalign             uint16
}

// ropeOptional are the bits of ZerosOut, PositionDeltas and SlotRemap.
const ropeOptional = 1<<5 | 1<<9 | 1<<12

func goodRopeSpec() ropeSpec {
	return ropeSpec{NumTokens: 10, NumQHeads: 8, NumKVHeads: 2, HeadDim: 64, BlockSize: 16, NumBlocks: 4,
		MaxPos: 100, RotDim: 32, NeoX: true, DType: uint8(F16), CacheDType: uint8(F16), Absent: ropeOptional}
}

func randRopeSpec(g gen) ropeSpec {
	hk := g.pick(1, 2, 8)
	s := ropeSpec{
		NumTokens: g.wild(g.pick(0, 1, 5, 16, int64(g.r.IntN(500)))), NumQHeads: g.wild(hk * g.pick(1, 4, 8)), NumKVHeads: g.wild(hk),
		HeadDim: g.wild(g.pick(16, 32, 64, 128, 256)), BlockSize: g.wild(g.pick(1, 16, 64)), NumBlocks: g.wild(g.pick(1, 4, 100)),
		MaxPos: g.wild(g.pick(1, 100, 4096)), NeoX: g.r.IntN(2) == 0, Layout: g.wild(g.pick(0, 1, 2, 3)),
		DType: uint8(g.pick(int64(F16), int64(BF16))),
	}
	if g.r.IntN(3) == 0 {
		s.NumKVTokens = g.wild(s.NumTokens + g.pick(0, 1, 9))
	}
	s.RotDim = g.wild(s.HeadDim / g.pick(1, 2))
	s.CacheDType = s.DType
	if g.r.IntN(3) == 0 {
		s.CacheDType, s.KScale, s.VScale = uint8(E4M3), 0.25, 4
		if s.Layout == 2 {
			s.BlockSize = 16
		}
	}
	if s.Layout == 2 && s.BlockSize < 8 {
		s.BlockSize = 16
	}
	s.QHeadStride, s.KHeadStride, s.VHeadStride = g.stride(s.HeadDim), g.stride(s.HeadDim), g.stride(s.HeadDim)
	s.QTokenStride = g.stride(s.NumQHeads * max(s.QHeadStride, s.HeadDim))
	s.KTokenStride = g.stride(s.NumKVHeads * max(s.KHeadStride, s.HeadDim))
	s.VTokenStride = g.stride(s.NumKVHeads * max(s.VHeadStride, s.HeadDim))
	sz := g.sizes(13)
	s.QSize, s.KSize, s.VSize, s.QOutSize, s.KOutSize, s.ZerosOutSize = sz[0], sz[1], sz[2], sz[3], sz[4], sz[5]
	s.KCacheSize, s.VCacheSize, s.PositionsSize, s.PositionDeltasSize, s.CosSinSize = sz[6], sz[7], sz[8], sz[9], sz[10]
	s.SlotMappingSize = sz[11]
	s.Absent = g.rare(16, 2) & ropeOptional
	if s.Absent&(1<<12) == 0 {
		s.SlotRemapSize, s.Abs = 8*int64(1+g.r.IntN(100)), 1<<12
	}
	s.Abs |= g.rare(12, 100)
	s.Misalign = g.rare(13, 100)
	return s
}

// ropeSeeds are overflow cases: a q stride of 2^62 with Q sized for
// contiguous rows; 2^53 q heads of 16 tokens, whose sizes wrap to 0 in
// int64; and 2^32+2 q heads, which an int32 kernel parameter would see as 2.
func ropeSeeds() []ropeSpec {
	good := goodRopeSpec()
	stride, wrap, trunc := good, good, good
	stride.QTokenStride, stride.QSize, stride.Abs = 1<<62, 10*8*64*2, 1
	wrap.NumTokens, wrap.NumQHeads = 16, 1<<53
	wrap.QSize, wrap.QOutSize, wrap.Abs = 0, 0, 1|1<<3
	trunc.NumQHeads = 1<<32 + 2 // with Q, QOut of any size a truncating check would ask for
	trunc.QSize, trunc.QOutSize, trunc.Abs = 1<<50, 1<<50, 1|1<<3
	return []ropeSpec{good, stride, wrap, trunc}
}

func TestRopeCacheValidateProperty(t *testing.T) {
	runProperty[ropeSpec, RopeCacheArgs](t, ropeArg, randRopeSpec, ropeModel)
}

func FuzzRopeCacheValidate(f *testing.F) {
	for _, s := range ropeSeeds() {
		f.Add(encodeSpec(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		exercise[RopeCacheArgs](t, ropeArg, specFrom[ropeSpec](data), ropeModel)
	})
}

// --- QKVNormRopeArgs ---

type qkvSpec struct {
	QKVTokenStride                        int64
	Norm                                  int64
	Eps                                   float32
	NumTokens, NumSeqs                    int64
	NumQHeads, NumKVHeads, HeadDim        int64
	BlockSize, NumBlocks, MaxBlocksPerSeq int64
	MaxPos, RotDim                        int64
	NeoX                                  bool
	DType, CacheDType                     uint8
	KScale, VScale                        float32
	Layout                                int64
	QKVSize, QOutSize                     int64
	KCacheSize, VCacheSize                int64
	BlockTablesSize                       int64
	CuSeqlensQSize, PosOffsetsSize        int64
	CosSinSize                            int64
	QNormWeightSize, KNormWeightSize      int64
	Abs, Absent, Misalign                 uint16
}

// qkvNoNorm are the bits of the norm weights; qkvNoCu the bit of CuSeqlensQ.
const (
	qkvNoNorm = 1<<8 | 1<<9
	qkvNoCu   = 1 << 5
)

func goodQKVSpec() qkvSpec {
	return qkvSpec{NumTokens: 12, NumSeqs: 3, NumQHeads: 8, NumKVHeads: 2, HeadDim: 128, BlockSize: 16, NumBlocks: 32,
		MaxBlocksPerSeq: 8, MaxPos: 4096, RotDim: 64, NeoX: true, Norm: int64(NormQK), Eps: 1e-6,
		DType: uint8(BF16), CacheDType: uint8(BF16)}
}

func randQKVSpec(g gen) qkvSpec {
	hk := g.pick(1, 2, 8)
	s := qkvSpec{
		NumTokens: g.wild(g.pick(0, 1, 7, 64, int64(g.r.IntN(1000)))), NumQHeads: g.wild(hk * g.pick(1, 4, 8)), NumKVHeads: g.wild(hk),
		HeadDim: g.wild(g.pick(16, 64, 128, 256)), BlockSize: g.wild(g.pick(1, 16, 32)), NumBlocks: g.wild(g.pick(1, 64, 1<<20)),
		MaxBlocksPerSeq: g.wild(g.pick(1, 16, 1000)), MaxPos: g.wild(g.pick(1, 4096)), NeoX: g.r.IntN(2) == 0,
		DType: uint8(g.pick(int64(F16), int64(BF16))),
	}
	s.RotDim = g.wild(s.HeadDim / g.pick(1, 2))
	s.CacheDType = s.DType
	if g.r.IntN(3) == 0 {
		s.CacheDType, s.KScale, s.VScale = uint8(E4M3), 1, 1
	}
	s.Layout = g.wild(g.pick(0, 1, 2, 3))
	if s.Layout == 2 && s.BlockSize < 16 {
		s.BlockSize = 16
	}
	if g.r.IntN(2) == 0 {
		s.Norm, s.Eps = int64(NormQK), 1e-5
	} else {
		s.Absent |= qkvNoNorm
	}
	if g.r.IntN(2) == 0 {
		s.NumSeqs = g.wild(g.pick(1, 2, 40))
	} else {
		s.NumSeqs, s.Absent = 1, s.Absent|qkvNoCu
	}
	s.QKVTokenStride = g.wild(g.stride((s.NumQHeads + 2*s.NumKVHeads) * s.HeadDim))
	sz := g.sizes(10)
	s.QKVSize, s.QOutSize, s.KCacheSize, s.VCacheSize, s.BlockTablesSize = sz[0], sz[1], sz[2], sz[3], sz[4]
	s.CuSeqlensQSize, s.PosOffsetsSize, s.CosSinSize, s.QNormWeightSize, s.KNormWeightSize = sz[5], sz[6], sz[7], sz[8], sz[9]
	s.Abs, s.Misalign = g.rare(10, 100), g.rare(10, 100)
	return s
}

// qkvSeeds: a token stride of 2^62 with QKV sized for contiguous tokens.
func qkvSeeds() []qkvSpec {
	good := goodQKVSpec()
	stride := good
	stride.QKVTokenStride, stride.QKVSize, stride.Abs = 1<<62, 12*(8+2*2)*128*2, 1
	return []qkvSpec{good, stride}
}

func TestQKVNormRopeValidateProperty(t *testing.T) {
	runProperty[qkvSpec, QKVNormRopeArgs](t, qkvArg, randQKVSpec, qkvModel)
}

func FuzzQKVNormRopeValidate(f *testing.F) {
	for _, s := range qkvSeeds() {
		f.Add(encodeSpec(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		exercise[QKVNormRopeArgs](t, qkvArg, specFrom[qkvSpec](data), qkvModel)
	})
}

// --- MLARopeQuantArgs ---

type mlaSpec struct {
	NumTokens, NumQHeads, NumKVHeads  int64
	LoraRank, RopeDim, MaxPos, RotDim int64
	NeoX                              bool
	QNopeTokenStride, QNopeHeadStride int64
	QRopeTokenStride, QRopeHeadStride int64
	KNopeTokenStride, KNopeHeadStride int64
	KRopeTokenStride, KRopeHeadStride int64
	DType                             uint8
	QOutScale, KOutScale              float32
	QNopeSize, QRopeSize              int64
	KNopeSize, KRopeSize              int64
	QOutSize, KNopeOutSize            int64
	KRopeOutSize                      int64
	PositionsSize, CosSinSize         int64
	Abs, Absent, Misalign             uint16
}

func goodMLASpec() mlaSpec {
	return mlaSpec{NumTokens: 6, NumQHeads: 16, NumKVHeads: 1, LoraRank: 512, RopeDim: 64, MaxPos: 1024, RotDim: 64,
		NeoX: true, DType: uint8(BF16), QOutScale: 0.5, KOutScale: 0.25}
}

func randMLASpec(g gen) mlaSpec {
	s := mlaSpec{
		NumTokens: g.wild(g.pick(0, 1, 6, int64(g.r.IntN(300)))), NumQHeads: g.wild(g.pick(1, 16, 128)), NumKVHeads: g.wild(g.pick(1, 2)),
		LoraRank: g.wild(8 * (1 + int64(g.r.IntN(64)))), RopeDim: g.wild(16 * (1 + int64(g.r.IntN(8)))),
		MaxPos: g.wild(g.pick(1, 1024)), NeoX: g.r.IntN(2) == 0, DType: uint8(g.pick(int64(F16), int64(BF16))),
		QOutScale: 0.5, KOutScale: 2,
	}
	s.RotDim = g.wild(s.RopeDim / g.pick(1, 2))
	s.QNopeHeadStride, s.QRopeHeadStride = g.stride(s.LoraRank), g.stride(s.RopeDim)
	s.KNopeHeadStride, s.KRopeHeadStride = g.stride(s.LoraRank), g.stride(s.RopeDim)
	s.QNopeTokenStride = g.stride(s.NumQHeads * max(s.QNopeHeadStride, s.LoraRank))
	s.QRopeTokenStride = g.stride(s.NumQHeads * max(s.QRopeHeadStride, s.RopeDim))
	s.KNopeTokenStride = g.stride(s.NumKVHeads * max(s.KNopeHeadStride, s.LoraRank))
	s.KRopeTokenStride = g.stride(s.NumKVHeads * max(s.KRopeHeadStride, s.RopeDim))
	sz := g.sizes(9)
	s.QNopeSize, s.QRopeSize, s.KNopeSize, s.KRopeSize, s.QOutSize = sz[0], sz[1], sz[2], sz[3], sz[4]
	s.KNopeOutSize, s.KRopeOutSize, s.PositionsSize, s.CosSinSize = sz[5], sz[6], sz[7], sz[8]
	s.Abs, s.Misalign = g.rare(9, 100), g.rare(9, 100)
	return s
}

// mlaSeeds: strides of 2^62 with the inputs sized for contiguous rows.
func mlaSeeds() []mlaSpec {
	good := goodMLASpec()
	qn, kr := good, good
	qn.QNopeTokenStride, qn.QNopeSize, qn.Abs = 1<<62, 6*16*512*2, 1
	kr.KRopeHeadStride, kr.NumKVHeads, kr.KRopeSize, kr.Abs = 1<<62, 2, 6*2*64*2, 1<<3
	return []mlaSpec{good, qn, kr}
}

func TestMLARopeQuantValidateProperty(t *testing.T) {
	runProperty[mlaSpec, MLARopeQuantArgs](t, mlaArg, randMLASpec, mlaModel)
}

func FuzzMLARopeQuantValidate(f *testing.F) {
	for _, s := range mlaSeeds() {
		f.Add(encodeSpec(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		exercise[MLARopeQuantArgs](t, mlaArg, specFrom[mlaSpec](data), mlaModel)
	})
}

// --- MLAConcatQArgs ---

type concatSpec struct {
	NumTokens, NumQHeads, LoraRank, RopeDim int64
	QNopeTokenStride, QNopeHeadStride       int64
	QRopeTokenStride, QRopeHeadStride       int64
	DType                                   uint8
	QNopeSize, QRopeSize, OutSize           int64
	Abs, Absent, Misalign                   uint16
}

func goodConcatSpec() concatSpec {
	return concatSpec{NumTokens: 6, NumQHeads: 16, LoraRank: 512, RopeDim: 64, DType: uint8(F16)}
}

func randConcatSpec(g gen) concatSpec {
	s := concatSpec{
		NumTokens: g.wild(g.pick(0, 1, 6, int64(g.r.IntN(300)))), NumQHeads: g.wild(g.pick(1, 16, 128)),
		LoraRank: g.wild(8 * (1 + int64(g.r.IntN(64)))), RopeDim: g.wild(8 * (1 + int64(g.r.IntN(16)))),
		DType: uint8(g.pick(int64(F16), int64(BF16))),
	}
	s.QNopeHeadStride, s.QRopeHeadStride = g.stride(s.LoraRank), g.stride(s.RopeDim)
	s.QNopeTokenStride = g.stride(s.NumQHeads * max(s.QNopeHeadStride, s.LoraRank))
	s.QRopeTokenStride = g.stride(s.NumQHeads * max(s.QRopeHeadStride, s.RopeDim))
	sz := g.sizes(3)
	s.QNopeSize, s.QRopeSize, s.OutSize = sz[0], sz[1], sz[2]
	s.Abs, s.Misalign = g.rare(3, 100), g.rare(3, 100)
	return s
}

// concatSeeds: a rope token stride of 2^62 with QRope sized for contiguous rows.
func concatSeeds() []concatSpec {
	good := goodConcatSpec()
	qr := good
	qr.QRopeTokenStride, qr.QRopeSize, qr.Abs = 1<<62, 6*16*64*2, 1<<1
	return []concatSpec{good, qr}
}

func TestMLAConcatQValidateProperty(t *testing.T) {
	runProperty[concatSpec, MLAConcatQArgs](t, concatArg, randConcatSpec, concatModel)
}

func FuzzMLAConcatQValidate(f *testing.F) {
	for _, s := range concatSeeds() {
		f.Add(encodeSpec(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		exercise[MLAConcatQArgs](t, concatArg, specFrom[concatSpec](data), concatModel)
	})
}

// --- VarlenArgs ---

type varlenSpec struct {
	NumSeqs, NumTokens                    int64
	NumQHeads, NumKVHeads, HeadDim        int64
	BlockSize, NumBlocks, MaxBlocksPerSeq int64
	MaxKVLen, KVCapacity, QTokenStride    int64
	OutTokenStride, OutHeadStride         int64
	Causal                                bool
	DType, CacheDType                     uint8
	Scale, KScale, VScale                 float32
	QSize, KCacheSize, VCacheSize         int64
	BlockTablesSize, CuSeqlensQSize       int64
	PosOffsetsSize, OutSize, LSESize      int64
	WorkspaceSize                         int64
	Abs, Absent, Misalign                 uint16
	Layout                                int64
}

// varlenLSE and varlenWorkspace are the bits of the optional buffers.
const (
	varlenLSE       = 1 << 7
	varlenWorkspace = 1 << 8
)

func goodVarlenSpec() varlenSpec {
	return varlenSpec{NumSeqs: 3, NumTokens: 40, NumQHeads: 16, NumKVHeads: 4, HeadDim: 128, BlockSize: 16,
		NumBlocks: 64, MaxBlocksPerSeq: 16, MaxKVLen: 200, Causal: true, DType: uint8(BF16), CacheDType: uint8(BF16),
		Absent: varlenLSE | varlenWorkspace}
}

func randVarlenSpec(g gen) varlenSpec {
	hk := g.pick(1, 2, 4, 8)
	s := varlenSpec{
		NumSeqs: g.wild(g.pick(1, 2, 3, 17, 1+int64(g.r.IntN(300)))), NumKVHeads: g.wild(hk),
		NumQHeads: g.wild(hk * g.pick(1, 2, 4, 8, 16)), HeadDim: g.wild(g.pick(64, 128, 256)),
		BlockSize: g.wild(g.pick(1, 16, 32, 256)), NumBlocks: g.wild(g.pick(1, 64, 1000)),
		MaxBlocksPerSeq: g.wild(g.pick(1, 16, 128)), Causal: g.r.IntN(2) == 0,
		DType: uint8(g.pick(int64(F16), int64(BF16))),
	}
	s.NumTokens = g.wild(g.pick(0, 1, s.NumSeqs, 63, 64, 65, 128, 129, int64(g.r.IntN(5000))))
	s.CacheDType = s.DType
	if g.r.IntN(3) == 0 {
		s.CacheDType, s.KScale, s.VScale = uint8(E4M3), 0.5, 2
	}
	if g.r.IntN(4) == 0 {
		s.Scale = float32(g.pick(1, 3)) / 16
	}
	s.Layout = g.wild(g.pick(0, 0, 1, 2, 3))
	s.QTokenStride = g.wild(g.stride(s.NumQHeads * s.HeadDim))
	// Out: contiguous, token-major or head-major with padding, or anything.
	pad := func() int64 { return 2 * int64(g.r.IntN(4)) }
	switch g.r.IntN(4) {
	case 1:
		s.OutHeadStride = s.HeadDim + pad()
		s.OutTokenStride = s.NumQHeads*s.OutHeadStride + pad()
	case 2:
		s.OutTokenStride = s.HeadDim + pad()
		s.OutHeadStride = max(s.NumTokens, 1)*s.OutTokenStride + pad()
	case 3:
		s.OutTokenStride, s.OutHeadStride = g.stride(s.NumQHeads*s.HeadDim), g.stride(s.HeadDim)
	}
	s.OutTokenStride, s.OutHeadStride = g.wild(s.OutTokenStride), g.wild(s.OutHeadStride)
	capTokens := max(min(s.MaxBlocksPerSeq*s.BlockSize, 1<<20), 0)
	s.MaxKVLen = g.wild(int64(g.r.IntN(int(capTokens) + 1)))
	s.KVCapacity = g.wild(g.pick(0, 0, s.MaxKVLen, capTokens))
	sz := g.sizes(8)
	s.QSize, s.KCacheSize, s.VCacheSize, s.BlockTablesSize = sz[0], sz[1], sz[2], sz[3]
	s.CuSeqlensQSize, s.PosOffsetsSize, s.OutSize, s.LSESize = sz[4], sz[5], sz[6], sz[7]
	s.Absent = uint16(g.r.IntN(2)) * varlenLSE
	if g.r.IntN(4) == 0 { // the engine's own split-K scratch, 256-byte aligned
		s.WorkspaceSize, s.Abs = g.wild(256*int64(1+g.r.IntN(64))), varlenWorkspace
	} else {
		s.Absent |= varlenWorkspace
	}
	s.Abs |= g.rare(8, 100)
	s.Misalign = g.rare(9, 100)
	return s
}

// varlenSeeds are hostile cases: strides of 2^62 with Q and Out sized for
// contiguous rows, NumQHeads 2^32+2 (2 as an int32), NumTokens MaxInt
// (whose product with NumQHeads wraps int64), negative counts and strides,
// odd and overlapping Out strides, and a head-major Out.
func varlenSeeds() []varlenSpec {
	good := goodVarlenSpec()
	const contiguous = 40 * 16 * 128 * 2
	var seeds []varlenSpec
	add := func(f func(s *varlenSpec)) {
		s := good
		f(&s)
		seeds = append(seeds, s)
	}
	add(func(s *varlenSpec) {})
	add(func(s *varlenSpec) { s.QTokenStride, s.QSize, s.Abs = 1<<62, contiguous, 1 })
	add(func(s *varlenSpec) {
		s.OutTokenStride, s.OutHeadStride, s.OutSize, s.Abs = 1<<62, 128, contiguous, 1<<6
	})
	add(func(s *varlenSpec) {
		s.OutTokenStride, s.OutHeadStride, s.OutSize, s.Abs = 128, 1<<62, contiguous, 1<<6
	})
	add(func(s *varlenSpec) { s.OutTokenStride, s.OutHeadStride = 1<<31, 1<<31 })
	add(func(s *varlenSpec) { s.NumQHeads, s.NumKVHeads = 1<<32+2, 2 })
	add(func(s *varlenSpec) { s.NumQHeads, s.QSize, s.OutSize, s.Abs = 1<<32+2, 1<<50, 1<<50, 1|1<<6 })
	add(func(s *varlenSpec) { s.NumTokens = math.MaxInt64 })
	add(func(s *varlenSpec) {
		s.NumTokens, s.QSize, s.OutSize, s.Abs = math.MaxInt64, contiguous, contiguous, 1|1<<6
	})
	add(func(s *varlenSpec) { s.NumTokens = 1 << 26 }) // NumTokens·NumQHeads at its bound, 2^30
	add(func(s *varlenSpec) { s.NumTokens = 1<<26 + 1 })
	add(func(s *varlenSpec) { s.NumTokens, s.NumQHeads, s.NumKVHeads = 1<<30, 1, 1 }) // the most packed rows of one sequence
	add(func(s *varlenSpec) { s.NumTokens, s.NumQHeads, s.NumKVHeads = 1<<31-1, 1, 1 })
	add(func(s *varlenSpec) { s.NumTokens = -1 })
	add(func(s *varlenSpec) { s.NumSeqs = -1 })
	add(func(s *varlenSpec) { s.NumBlocks, s.BlockSize = -1, -16 })
	add(func(s *varlenSpec) { s.QTokenStride = -8 })
	add(func(s *varlenSpec) { s.OutTokenStride, s.OutHeadStride = -2048, -128 })
	add(func(s *varlenSpec) { s.OutTokenStride, s.OutHeadStride = 2049, 128 })
	add(func(s *varlenSpec) { s.OutTokenStride, s.OutHeadStride = 2048, 127 })
	add(func(s *varlenSpec) { s.OutTokenStride, s.OutHeadStride = 2000, 128 })
	add(func(s *varlenSpec) { s.OutTokenStride, s.OutHeadStride = 128, 40*128 })
	add(func(s *varlenSpec) { s.OutTokenStride, s.OutHeadStride = 128, 40*128-2 })
	add(func(s *varlenSpec) { s.NumTokens, s.QSize, s.OutSize, s.Abs = 0, 0, 0, 1|1<<6 })
	add(func(s *varlenSpec) {
		s.NumBlocks, s.NumKVHeads, s.NumQHeads, s.HeadDim, s.BlockSize = math.MaxInt32, 65535, 65535, 256, 256
	})
	add(func(s *varlenSpec) { s.MaxBlocksPerSeq, s.BlockSize, s.NumSeqs = 1<<22, 256, 1<<24 })
	add(func(s *varlenSpec) { s.CacheDType, s.KScale, s.VScale = uint8(E4M3), 0.5, float32(math.Inf(1)) })
	add(func(s *varlenSpec) { s.Scale = float32(math.NaN()) })
	add(func(s *varlenSpec) {
		s.WorkspaceSize, s.Abs, s.Absent, s.Misalign = 4096, varlenWorkspace, varlenLSE, varlenWorkspace
	})
	return seeds
}

// hostLengths decodes the fuzz engine's bytes into HostCuSeqlensQ and
// HostPosOffsets: the first byte is how many int32 values (little-endian,
// after it) go to HostCuSeqlensQ, the rest go to HostPosOffsets.
func hostLengths(data []byte) (cu, pos []int32) {
	if len(data) == 0 {
		return nil, nil
	}
	n, vals := int(data[0]), data[1:]
	var all []int32
	for len(vals) >= 4 {
		all = append(all, int32(binary.LittleEndian.Uint32(vals)))
		vals = vals[4:]
	}
	n = min(n, len(all))
	return all[:n:n], all[n:]
}

// encodeHostLengths is hostLengths' inverse.
func encodeHostLengths(cu, pos []int32) []byte {
	out := []byte{byte(len(cu))}
	for _, v := range append(append([]int32(nil), cu...), pos...) {
		out = binary.LittleEndian.AppendUint32(out, uint32(v))
	}
	return out
}

func TestVarlenValidateProperty(t *testing.T) {
	runProperty[varlenSpec, VarlenArgs](t, varlenArg, randVarlenSpec, varlenModel)
}

// FuzzVarlenArgs: VarlenArgs.Validate never panics, and whenever it
// accepts a spec (with host copies of the lengths, or none) every byte the
// varlen kernels may touch lies inside its buffer.
func FuzzVarlenArgs(f *testing.F) {
	for _, s := range varlenSeeds() {
		f.Add(encodeSpec(s), []byte(nil))
	}
	good := encodeSpec(goodVarlenSpec())
	for _, h := range [][2][]int32{
		{{0, 1, 17, 40}, {99, 0, 177}},                     // valid: q_len 1, 16, 23 up to MaxKVLen
		{{0, 0, 40, 40}, {200, 160, 0}},                    // q_len 0 sequences
		{{0, 1, 17, 40}, nil},                              // offsets left to the device
		{nil, {99, 0, 177}},                                // offsets without bounds
		{{0, 17, 1, 40}, {0, 0, 0}},                        // decreasing
		{{-1, 1, 17, 40}, {0, 0, 0}},                       // first bound not 0
		{{0, 1, 17, 41}, {0, 0, 0}},                        // total past NumTokens
		{{0, 1, 17, 40}, {-1, 0, 0}},                       // negative offset
		{{0, 1, 17, 40}, {math.MaxInt32, 0, 0}},            // offset + q_len past int32
		{{0, math.MaxInt32, math.MaxInt32, 40}, {0, 0, 0}}, // q_len past int32
		{{0, 1, 17, 40, 41}, {0, 0, 0, 0}},                 // one too many
		{{0}, {}},                                          // too few
	} {
		f.Add(good, encodeHostLengths(h[0], h[1]))
	}
	f.Fuzz(func(t *testing.T, data, host []byte) {
		cu, pos := hostLengths(host)
		exercise[VarlenArgs](t, varlenArg, specFrom[varlenSpec](data), varlenModel, func(a *VarlenArgs) {
			a.HostCuSeqlensQ, a.HostPosOffsets = cu, pos
		})
	})
}

// --- Buffer.Slice ---

// FuzzBufferSlice checks that a view Slice returns lies inside its parent:
// never a wrapped pointer, never more bytes than the parent has past off.
func FuzzBufferSlice(f *testing.F) {
	f.Add(uint64(0x7f0000000000), int64(4096), int64(math.MaxInt64), int64(1))
	f.Add(uint64(0x7f0000000000), int64(4096), int64(1), int64(math.MaxInt64))
	f.Add(uint64(0x7f0000000000), int64(4096), int64(4000), int64(96))
	f.Add(uint64(math.MaxUint64-15), int64(math.MaxInt64), int64(32), int64(0))
	f.Fuzz(func(t *testing.T, ptr uint64, bytes, off, n int64) {
		b := Buffer{Ptr: ptrAt(ptr), Bytes: bytes}
		v, err := b.Slice(off, n)
		if err != nil {
			assert.ErrorIs(t, err, ErrInvalidArgument)
			return
		}
		first := badd(bi(int64(v.Ptr>>1)), bi(int64(v.Ptr>>1)), bi(int64(v.Ptr&1)))
		parent := badd(bi(int64(b.Ptr>>1)), bi(int64(b.Ptr>>1)), bi(int64(b.Ptr&1)))
		assert.True(t, first.Cmp(parent) >= 0, "the view starts before its parent")
		assert.True(t, badd(first, bi(v.Bytes)).Cmp(badd(parent, bi(b.Bytes))) <= 0, "the view ends after its parent")
		assert.GreaterOrEqual(t, v.Bytes, int64(0))
	})
}
