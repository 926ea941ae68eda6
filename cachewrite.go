package pagedkv

// Checks shared by the ops that write the paged cache (Append, RopeCache).

// tokenRows is a token-major input [tokens, heads, headDim] at element
// strides, as an argument struct names it.
type tokenRows struct {
	field, tokenF, headF string
	buf                  Buffer
	tokens, heads, dim   int
	token, head          int
}

// strides returns the strides in effect: 0 means contiguous, and the stride
// of a dimension of size 1 (one head, one token) is canonicalized to the
// contiguous one, since it never moves an address.
func (r tokenRows) strides() (token, head int64) {
	pick := func(v, n int, contiguous int64) int64 {
		if v == 0 || n == 1 {
			return contiguous
		}
		return int64(v)
	}
	head = pick(r.head, r.heads, int64(r.dim))
	token = pick(r.token, r.tokens, int64(r.heads)*int64(r.dim))
	return token, head
}

// check validates the strides (multiples of 8 elements that keep heads and
// tokens apart) and that buf holds every element the shapes address.
func (r tokenRows) check(arg string, d DType) error {
	token, head := r.strides()
	row := int64(r.dim)
	if head%8 != 0 || head < row {
		return errf("%s.%s=%d is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ HeadDim=%d", arg, r.headF, head, row)
	}
	span := int64(r.heads-1)*head + row
	if token%8 != 0 || token < span {
		return errf("%s.%s=%d is not allowed; allowed: 0 (contiguous) or a multiple of 8 ≥ %d (the heads' span)", arg, r.tokenF, token, span)
	}
	if r.tokens == 0 {
		return nil
	}
	need := (int64(r.tokens-1)*token + span) * int64(d.Size())
	return buffer(arg, r.field, r.buf, need, 16)
}

// cacheTarget is the destination of a cache write: the caches, the slots
// and the element types.
type cacheTarget struct {
	keyCache, valueCache, slotMapping, slotRemap Buffer
	tokens, kvHeads, headDim, blockSize, blocks  int
	in, cache                                    DType
	kScale, vScale                               float32
	layout                                       CacheLayout
}

// check validates dtypes, shapes, layout, scales, cache capacities and the
// slot buffers.
func (c cacheTarget) check(arg string) error {
	if c.in != F16 && c.in != BF16 {
		return errf("%s.DType=%s is not supported; allowed: f16, bf16", arg, c.in)
	}
	if c.cache != c.in && c.cache != E4M3 {
		return errf("%s.CacheDType=%s is not supported with DType=%s; allowed: %s, e4m3", arg, c.cache, c.in, c.in)
	}
	if c.headDim%8 != 0 || c.headDim < 8 || c.headDim > 256 {
		return errf("%s.HeadDim=%d is not supported; allowed: a multiple of 8 from 8 to 256", arg, c.headDim)
	}
	if err := inRange(arg, "NumKVHeads", c.kvHeads, 1, 1<<16); err != nil {
		return err
	}
	if err := inRange(arg, "NumTokens", c.tokens, 0, 1<<30); err != nil {
		return err
	}
	if err := powerOfTwo(arg, "BlockSize", c.blockSize, 1, 256); err != nil {
		return err
	}
	if err := inRange(arg, "NumBlocks", c.blocks, 1, 1<<40); err != nil {
		return err
	}
	if err := checkLayout(arg, c.layout, c.cache, c.headDim, c.blockSize); err != nil {
		return err
	}
	if err := cacheScale(arg, "KScale", c.kScale, c.cache); err != nil {
		return err
	}
	if err := cacheScale(arg, "VScale", c.vScale, c.cache); err != nil {
		return err
	}
	elems, err := mul(arg, "NumBlocks·BlockSize·NumKVHeads·HeadDim", int64(c.blocks), int64(c.blockSize), int64(c.kvHeads), int64(c.headDim))
	if err != nil {
		return err
	}
	bytes := elems * int64(c.cache.Size())
	if err := buffer(arg, "KeyCache", c.keyCache, bytes, 16); err != nil {
		return err
	}
	if err := buffer(arg, "ValueCache", c.valueCache, bytes, 16); err != nil {
		return err
	}
	if c.tokens > 0 {
		if err := buffer(arg, "SlotMapping", c.slotMapping, int64(c.tokens)*8, 8); err != nil {
			return err
		}
	}
	if !c.slotRemap.IsZero() {
		if err := buffer(arg, "SlotRemap", c.slotRemap, 8, 8); err != nil {
			return err
		}
		if c.slotRemap.Bytes%8 != 0 {
			return errf("%s.SlotRemap holds %d bytes, not a whole number of int64 entries", arg, c.slotRemap.Bytes)
		}
	}
	return nil
}

// scales returns the scales the kernels divide by: the fp8 scales, or 1.
func (c cacheTarget) scales() (k, v float32) {
	if c.cache == E4M3 {
		return c.kScale, c.vScale
	}
	return 1, 1
}
