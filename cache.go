package pagedkv

import (
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// AppendArgs describes one KV-cache append ("reshape and cache", flash
// layout): token t's key and value rows go to slot SlotMapping[t] of the
// caches.
//
//   - Key, Value: [NumTokens, NumKVHeads, HeadDim] of DType, element strides
//     KeyTokenStride/KeyHeadStride (0 = contiguous: NumKVHeads·HeadDim and
//     HeadDim), likewise for Value. Strides and pointers must keep every
//     8-element row 16-byte aligned.
//   - KeyCache, ValueCache: [NumBlocks, BlockSize, NumKVHeads, HeadDim] of
//     CacheDType, which is DType or E4M3 (value / KScale or VScale, rounded to
//     nearest even, saturated to ±448).
//   - SlotMapping: int64 [NumTokens] on the device; a negative slot skips the
//     token. SlotRemap (optional): int64 table, slot = SlotRemap[slot],
//     negative skips (sliding-window caches). Slots the host cannot see are
//     checked on the device: an out-of-range slot is not written and is
//     recorded in the stream's fault record (see Stream.Fault).
//   - Tokens sharing one slot are written in an unspecified order.
type AppendArgs struct {
	Key, Value             Buffer
	KeyCache, ValueCache   Buffer
	SlotMapping, SlotRemap Buffer

	NumTokens, NumKVHeads, HeadDim int
	BlockSize, NumBlocks           int

	KeyTokenStride, KeyHeadStride     int
	ValueTokenStride, ValueHeadStride int

	DType, CacheDType DType
	KScale, VScale    float32
}

const appendArg = "AppendArgs"

// strides returns the strides in effect (0 means contiguous).
func (a *AppendArgs) strides() (kt, kh, vt, vh int64) {
	kh, vh = int64(a.KeyHeadStride), int64(a.ValueHeadStride)
	if kh == 0 {
		kh = int64(a.HeadDim)
	}
	if vh == 0 {
		vh = int64(a.HeadDim)
	}
	kt, vt = int64(a.KeyTokenStride), int64(a.ValueTokenStride)
	if kt == 0 {
		kt = int64(a.NumKVHeads) * int64(a.HeadDim)
	}
	if vt == 0 {
		vt = int64(a.NumKVHeads) * int64(a.HeadDim)
	}
	return
}

// Validate checks every shape, dtype, stride, alignment and buffer capacity.
func (a *AppendArgs) Validate() error {
	if a.DType != F16 && a.DType != BF16 {
		return errf("%s.DType=%s is not supported; allowed: f16, bf16", appendArg, a.DType)
	}
	if a.CacheDType != a.DType && a.CacheDType != E4M3 {
		return errf("%s.CacheDType=%s is not supported with DType=%s; allowed: %s, e4m3", appendArg, a.CacheDType, a.DType, a.DType)
	}
	if a.HeadDim%8 != 0 || a.HeadDim < 8 || a.HeadDim > 256 {
		return errf("%s.HeadDim=%d is not supported; allowed: a multiple of 8 from 8 to 256", appendArg, a.HeadDim)
	}
	if err := inRange(appendArg, "NumKVHeads", a.NumKVHeads, 1, 1<<16); err != nil {
		return err
	}
	if err := inRange(appendArg, "NumTokens", a.NumTokens, 0, 1<<30); err != nil {
		return err
	}
	if err := powerOfTwo(appendArg, "BlockSize", a.BlockSize, 1, 256); err != nil {
		return err
	}
	if err := inRange(appendArg, "NumBlocks", a.NumBlocks, 1, 1<<40); err != nil {
		return err
	}
	if err := cacheScale(appendArg, "KScale", a.KScale, a.CacheDType); err != nil {
		return err
	}
	if err := cacheScale(appendArg, "VScale", a.VScale, a.CacheDType); err != nil {
		return err
	}
	row := int64(a.HeadDim)
	kt, kh, vt, vh := a.strides()
	for _, s := range []struct {
		field         string
		token, head   int64
		tokenF, headF string
	}{
		{"Key", kt, kh, "KeyTokenStride", "KeyHeadStride"},
		{"Value", vt, vh, "ValueTokenStride", "ValueHeadStride"},
	} {
		if s.head%8 != 0 || s.head < row && a.NumKVHeads > 1 {
			return errf("%s.%s=%d is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ HeadDim=%d", appendArg, s.headF, s.head, row)
		}
		span := int64(a.NumKVHeads-1)*s.head + row
		if s.token%8 != 0 || s.token < span && a.NumTokens > 1 {
			return errf("%s.%s=%d is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ %d (the heads' span)", appendArg, s.tokenF, s.token, span)
		}
	}
	esize := int64(a.DType.Size())
	if a.NumTokens > 0 {
		kneed := (int64(a.NumTokens-1)*kt + int64(a.NumKVHeads-1)*kh + row) * esize
		vneed := (int64(a.NumTokens-1)*vt + int64(a.NumKVHeads-1)*vh + row) * esize
		if err := buffer(appendArg, "Key", a.Key, kneed, 16); err != nil {
			return err
		}
		if err := buffer(appendArg, "Value", a.Value, vneed, 16); err != nil {
			return err
		}
		if err := buffer(appendArg, "SlotMapping", a.SlotMapping, int64(a.NumTokens)*8, 8); err != nil {
			return err
		}
	}
	cacheElems, err := mul(appendArg, "NumBlocks·BlockSize·NumKVHeads·HeadDim", int64(a.NumBlocks), int64(a.BlockSize), int64(a.NumKVHeads), row)
	if err != nil {
		return err
	}
	cbytes := cacheElems * int64(a.CacheDType.Size())
	if err := buffer(appendArg, "KeyCache", a.KeyCache, cbytes, 16); err != nil {
		return err
	}
	if err := buffer(appendArg, "ValueCache", a.ValueCache, cbytes, 16); err != nil {
		return err
	}
	if !a.SlotRemap.IsZero() {
		if err := buffer(appendArg, "SlotRemap", a.SlotRemap, 8, 8); err != nil {
			return err
		}
		if a.SlotRemap.Bytes%8 != 0 {
			return errf("%s.SlotRemap holds %d bytes, not a whole number of int64 entries", appendArg, a.SlotRemap.Bytes)
		}
	}
	return nil
}

// cacheAppendParams is the parameter list of the cache_append_flash_* kernels,
// in PTX order (kernels_src/cache.cu).
type cacheAppendParams struct {
	Key, Value, KeyCache, ValueCache  driver.DevicePtr
	SlotMapping, SlotRemap, Fault     driver.DevicePtr
	NumSlots, NumRemap                int64
	NumTokens, NumKVHeads, HeadDim    int32
	KeyTokenStride, KeyHeadStride     int64
	ValueTokenStride, ValueHeadStride int64
	KScale, VScale                    float32
}

// Append writes the tokens of a into the paged caches on stream s.
func (r *Runtime) Append(s *Stream, a *AppendArgs) error {
	if err := r.live(); err != nil {
		return err
	}
	if err := a.Validate(); err != nil {
		return err
	}
	plan, err := dispatch.PlanAppend(dispatch.AppendShape{
		NumTokens: a.NumTokens, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim, In: a.DType, Cache: a.CacheDType,
	})
	if err != nil {
		return err
	}
	if plan.Grid.X == 0 {
		return nil
	}
	fn, _, err := r.function(plan.Kernel)
	if err != nil {
		return err
	}
	kt, kh, vt, vh := a.strides()
	p := cacheAppendParams{
		Key: a.Key.Ptr, Value: a.Value.Ptr, KeyCache: a.KeyCache.Ptr, ValueCache: a.ValueCache.Ptr,
		SlotMapping: a.SlotMapping.Ptr, SlotRemap: a.SlotRemap.Ptr, Fault: s.fault,
		NumSlots:  int64(a.NumBlocks) * int64(a.BlockSize),
		NumRemap:  a.SlotRemap.Bytes / 8,
		NumTokens: int32(a.NumTokens), NumKVHeads: int32(a.NumKVHeads), HeadDim: int32(a.HeadDim),
		KeyTokenStride: kt, KeyHeadStride: kh, ValueTokenStride: vt, ValueHeadStride: vh,
		KScale: 1, VScale: 1,
	}
	if a.CacheDType == E4M3 {
		p.KScale, p.VScale = a.KScale, a.VScale
	}
	capturing := false
	if r.cfg.CheckBounds {
		if capturing, err = s.capturing(); err != nil {
			return err
		}
	}
	err = r.do(func() error {
		return driver.Launch(fn, dim(plan.Grid), dim(plan.Block), plan.SharedBytes, s.s, &p)
	})
	if err != nil {
		return err
	}
	return s.afterLaunch(capturing)
}

func dim(d dispatch.Dim3) driver.Dim3 { return driver.Dim3{X: d.X, Y: d.Y, Z: d.Z} }
