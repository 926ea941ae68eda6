// append.cuh: the kernels that write new key/value tokens into the paged KV
// cache and gather them back, and the macros that instantiate them (cache.cu;
// cache_sm90.cu builds the fp8 appends for compute_90).
//
// Layouts: see cache.cuh.
//
// cache_append_<in>[_e4m3]
//   key, value   [num_tokens, num_kv_heads, head_dim] of type <in> at element
//                strides (token, head); rows of 8 elements must be 16-byte aligned.
//   key_cache,   in the layout above, of type <in>, or fp8 e4m3 (value / scale,
//   value_cache  rounded to nearest even, saturated to ±448) for _e4m3.
//   slot_mapping int64 [num_tokens], read on the device; negative = skip token.
//   slot_remap   optional int64 [num_remap]: slot = slot_remap[slot] (sliding-
//                window caches); negative = skip. Null when unused.
//   fault        optional fault record (common.cuh): a slot or remap index out
//                of range is recorded there and that token is not written.
// cache_gather_<cache>
//   key_out, value_out [num_tokens, num_kv_heads, head_dim] of the cache type:
//                the elements of slots[t], bit for bit (the inverse of append
//                with an unconverted cache); a negative slot leaves row t as
//                it was, a slot beyond the cache is recorded in fault.
//
// Grid: ceil(2·ceil(num_tokens/(2N))·num_kv_heads·head_dim/8 / 128) blocks of
// 128 threads (dispatch.PlanAppend). Each thread moves 8 elements (one
// 16-byte piece of a 16-bit row) of one head, of K and of V, for a group of N
// consecutive tokens: N = 8, or 2 for the _t2 entries (flash layout only,
// see cache_append). Groups 2q and 2q+1 (tokens 16q..16q+15) form a pair on
// adjacent lanes: threads are numbered group-in-pair fastest, then piece,
// then head, then pair, so a warp reads two token rows 8 apart as consecutive
// 16-byte pieces. No shared memory.
//
// V in the x-split and shuffle layouts is token-minor: the elements (o, d) of
// one page and head for the 8 rows o = o0..o0+7, o0 a multiple of 8, are
// contiguous (16 bytes of a 16-bit cache, 8 of fp8). When a group's 8
// resolved slots are such a run (s0 % 8 == 0, s_j = s0 + j, block_size ≥ 8:
// what a prefill's slot mapping gives), the thread transposes the 8×8 tile in
// registers and writes (or reads) V as 8 vector pieces, one per element.
// When both groups of a pair are such runs and together are the 16 rows
// s0..s0+15 of one page (s0 % 16 == 0: block_size ≥ 16), the two lanes trade
// pieces with shuffles (pair_interleave) so that each store instruction
// writes whole 32-byte sectors: K store i puts rows 2i and 2i+1 of the run
// side by side, and x-split V row d+e gets its two 16-byte halves from the
// two lanes (16-bit; fp8 K completes a sector with the neighbouring piece's
// lanes, fp8 V keeps half sectors). Shuffle-layout V is written per lane.
// For 16-bit caches with head_dim a power of two the pairs' runs go through
// shared memory instead (store_pair_tiles, 32 KiB per block): a warp puts its
// K and V pieces at their place in each (page run, head) tile and then stores
// 32 consecutive 16-byte pieces per instruction, as the flash layout does. Both lanes of a pair reach the shuffles: only whole pairs
// past the grid end return early, and a second group past the last token
// runs with n = 0.
// Every other group (the flash layout, scattered decode slots, skipped or
// remapped-away tokens, a partial group at the end) moves each token on its
// own, V at the layout's element stride.
#pragma once
#include "cache.cuh"

namespace pkv {

// kGroupTokens is how many consecutive tokens one thread moves; the host
// plans ceil(num_tokens / kGroupTokens) token groups (dispatch/append.go).
constexpr int kGroupTokens = 8;

// TokenGroup is the work of one thread: element d..d+7 of head h for tokens
// t0 .. t0+n-1 (n = 0 for the second group of a pair past the last token).
// p is which group of its pair the thread moves: token groups 2q and 2q+1
// (tokens 16q .. 16q+15) sit in lanes 2u and 2u+1 of one warp. (Groups of
// N < kGroupTokens tokens, see cache_append, pair the same way.)
struct TokenGroup {
  int64_t t0;
  int n, h, d, p;
};

// token_group maps this thread to its group; false for a thread past the
// end of the grid. Threads are numbered p fastest, then piece, then head,
// then pair of groups. The grid covers whole pairs and blocks hold whole
// warps, so both lanes of a pair return together or not at all.
template <int N = kGroupTokens>
__device__ __forceinline__ bool token_group(int num_tokens, int num_kv_heads, int head_dim, TokenGroup* g) {
  const int vecs_per_head = head_dim >> 3;
  const int64_t vecs_per_group = (int64_t)num_kv_heads * vecs_per_head;
  const int64_t pairs = ((int64_t)num_tokens + 2 * N - 1) / (2 * N);
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= pairs * 2 * vecs_per_group) return false;
  g->p = (int)(i & 1);
  const int64_t u = i >> 1;
  const int64_t q = u / vecs_per_group;
  const int r = (int)(u - q * vecs_per_group);
  g->h = r / vecs_per_head;
  g->d = (r - g->h * vecs_per_head) << 3;
  g->t0 = (2 * q + g->p) * N;
  g->n = (int)max((int64_t)0, min((int64_t)N, (int64_t)num_tokens - g->t0));
  return true;
}

// page_run reports whether the group's resolved slots (-1 = skip) are one
// aligned run of rows inside a page whose V is token-minor (see above).
__device__ __forceinline__ bool page_run(const int64_t (&slot)[kGroupTokens], int n, int layout,
                                         int block_size_log2) {
  bool run = !flash_rows(layout) && n == kGroupTokens && block_size_log2 >= 3 && slot[0] >= 0 &&
             (slot[0] & (kGroupTokens - 1)) == 0;
#pragma unroll
  for (int j = 1; j < kGroupTokens; ++j) run &= slot[j] == slot[0] + j;
  return run;
}

// pair_mask is the shuffle mask of this thread's pair of lanes.
__device__ __forceinline__ unsigned pair_mask() { return 3u << (threadIdx.x & 30u); }

// pair_run reports, identically in both lanes of a pair, whether the pair's
// two groups are page runs that together are the 16 rows s0 .. s0+15 of one
// page, s0 % 16 == 0 (so block_size ≥ 16). run is this lane's page_run, s the
// lane's first resolved slot. Both lanes must call it.
__device__ __forceinline__ bool pair_run(bool run, int64_t s, int p, int block_size_log2, unsigned mask) {
  const int64_t start = s - (int64_t)p * kGroupTokens;  // the run start this lane implies
  const int64_t other_start = __shfl_xor_sync(mask, start, 1);
  const int other_run = __shfl_xor_sync(mask, (int)run, 1);
  return run && other_run && other_start == start && block_size_log2 >= 4 && (start & 15) == 0;
}

// shfl_pair returns the partner lane's v.
__device__ __forceinline__ uint4 shfl_pair(unsigned mask, uint4 v) {
  return make_uint4(__shfl_xor_sync(mask, v.x, 1), __shfl_xor_sync(mask, v.y, 1), __shfl_xor_sync(mask, v.z, 1),
                    __shfl_xor_sync(mask, v.w, 1));
}
__device__ __forceinline__ uint2 shfl_pair(unsigned mask, uint2 v) {
  return make_uint2(__shfl_xor_sync(mask, v.x, 1), __shfl_xor_sync(mask, v.y, 1));
}

// pair_interleave deals a pair's 16 pieces (lane 0 holds in[0..7] = pieces
// 0..7, lane 1 holds pieces 8..15) so that out[i] is piece 2i + p: in each
// store i the two lanes write adjacent pieces. Lane 1 needs lane 0's pieces
// 2i+1 for i < 4, lane 0 needs lane 1's pieces 2i for i ≥ 4 (its in[2i-8]);
// round m trades both needs at once.
template <typename Vec>
__device__ __forceinline__ void pair_interleave(const Vec (&in)[kGroupTokens], int p, unsigned mask,
                                                Vec (&out)[kGroupTokens]) {
#pragma unroll
  for (int m = 0; m < kGroupTokens / 2; ++m) {
    const Vec recv = shfl_pair(mask, p ? in[2 * m] : in[2 * m + 1]);
    out[m] = p ? recv : in[2 * m];
    out[m + kGroupTokens / 2] = p ? in[2 * m + 1] : recv;
  }
}

// to_cache converts 8 input elements to the cache type.
template <typename In, bool FP8>
__device__ __forceinline__ typename Raw<FP8 ? 1 : 2>::vec to_cache(uint4 v, const E4M3Divisor& scale) {
  if constexpr (FP8) {
    return to_e4m3x8<In>(v, scale);
  } else {
    return v;
  }
}

// Threads of an append or gather block (dispatch.AppendThreads).
constexpr int kAppendThreads = 128;
constexpr int kAppendWarps = kAppendThreads / 32;

// stage_index swizzles a warp's 16-byte piece index so that the writes of a
// lane's pieces and the reads of 32 consecutive ones are free of bank
// conflicts (it only permutes the low 3 bits).
__device__ __forceinline__ int stage_index(int i) { return i ^ ((i >> 3) & 7); }

// store_pair_tiles writes the 16-row page runs of a warp (16-bit caches,
// x-split or shuffle layout, head_dim a power of two) through shared memory,
// so that each store instruction writes 32 consecutive 16-byte pieces of the
// destination: K's (page, head) tile is [head_dim/8][rows][8] and shuffle V's
// [rows/8][head_dim][8], contiguous for any block size; x-split V's is
// [head_dim][block_size], contiguous for block size 16. The lanes of a group
// (one pair of token groups, one head, at most 16 pieces of the head: 2·cg
// lanes, p fastest, then piece) put their pieces at their place in the
// group's tile; then every lane stores pieces lane, lane+32, ... of the warp.
// pair says this lane's pair is a run starting at slot start; it is the same
// in every lane of a group. Every lane of the warp must call it.
template <int X, bool KEYS>
__device__ __forceinline__ void store_pair_tiles(const uint4 (&k)[kGroupTokens], const uint4 (&v)[kGroupTokens],
                                                 bool pair, int64_t start, const TokenGroup& g, void* key_cache,
                                                 void* value_cache, int layout, int num_kv_heads, int head_dim,
                                                 int block_size_log2) {
  constexpr int kPieces = 32 * kGroupTokens;  // per warp, of K and of V
  __shared__ uint4 k_s[kAppendWarps][kPieces];
  __shared__ uint4 v_s[kAppendWarps][kPieces];
  __shared__ int64_t start_s[kAppendWarps][16];  // per group; -1: not a run
  __shared__ int head_s[kAppendWarps][16], chunk_s[kAppendWarps][16];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int cg = min(head_dim >> 3, 16);  // pieces of a head per group
  const int lanes = 2 * cg;
  const int grp = lane / lanes;
  const int cl = (lane & (lanes - 1)) >> 1;  // this lane's piece within the group
  const int group_pieces = 16 * cg;
  const int base = grp * group_pieces;
  if (pair) {
    if constexpr (KEYS) {
#pragma unroll
      for (int j = 0; j < kGroupTokens; ++j) k_s[warp][stage_index(base + cl * 16 + g.p * 8 + j)] = k[j];
    }
    uint4 col[kGroupTokens];
    transpose8x8(v, col);
#pragma unroll
    for (int e = 0; e < kGroupTokens; ++e) {
      const int at = layout == kLayoutXSplit ? 2 * (8 * cl + e) + g.p : g.p * 8 * cg + 8 * cl + e;
      v_s[warp][stage_index(base + at)] = col[e];
    }
  }
  if ((lane & (lanes - 1)) == 0) {
    start_s[warp][grp] = pair ? start : -1;
    head_s[warp][grp] = g.h;
    chunk_s[warp][grp] = g.d >> 3;  // the group's first piece (cl = 0 here)
  }
  __syncwarp();
  int st;
#pragma unroll
  for (int i = 0; i < kGroupTokens; ++i) {
    const int piece = lane + 32 * i;
    const int gi = piece / group_pieces;
    const int pi = piece - gi * group_pieces;
    const int64_t s0 = start_s[warp][gi];
    if (s0 < 0) continue;
    const int h = head_s[warp][gi];
    const int c0 = chunk_s[warp][gi];
    // K: piece pi is row pi % 16 of the run, elements 8·(c0 + pi/16) ..
    if constexpr (KEYS) {
      const int64_t kat = cache_place<X>(layout, false, s0 + (pi & 15), h, 8 * (c0 + (pi >> 4)), num_kv_heads,
                                         head_dim, block_size_log2, &st);
      store8<2>(key_cache, kat, 1, k_s[warp][stage_index(piece)]);
    }
    // V: x-split piece pi is element row pi/2, rows 8·(pi%2) ..; shuffle
    // piece pi is x-block pi / (8·cg), element row pi % (8·cg).
    const int half = layout == kLayoutXSplit ? pi & 1 : pi / (8 * cg);
    const int d = 8 * c0 + (layout == kLayoutXSplit ? pi >> 1 : pi - half * 8 * cg);
    const int64_t vat = cache_place<X>(layout, true, s0 + 8 * half, h, d, num_kv_heads, head_dim, block_size_log2, &st);
    store8<2>(value_cache, vat, 1, v_s[warp][stage_index(piece)]);
  }
}

// MappedSlots is cache_append's default slot source: slot_mapping and the
// optional remap (resolve_slots). Another source (a struct with kMapped
// false and resolve(t0, n, slot), as resolve_slots) computes the slots
// itself, and slot_mapping, slot_remap and fault are then unused.
struct MappedSlots {
  static constexpr bool kMapped = true;
};

// cache_append moves groups of N consecutive tokens per thread: N =
// kGroupTokens for every layout (the page runs above need 8), or fewer for
// the flash layout only (PKV_CACHE_APPEND_TOKENS), where every token moves
// on its own anyway: an fp8 thread converts N·16 elements after its loads,
// and with N = 8 a small append (T = 64: 1024 threads on 8 SMs) waits on
// those 128 conversions in a row. KEYS false moves V alone (key and
// key_cache unused): QKVNormRope's values (qkv.cu).
template <typename In, bool FP8, int N, bool KEYS = true, typename Slots = MappedSlots>
__device__ __forceinline__ void cache_append(
    const In* __restrict__ key, const In* __restrict__ value, void* __restrict__ key_cache,
    void* __restrict__ value_cache, const int64_t* __restrict__ slot_mapping,
    const int64_t* __restrict__ slot_remap, unsigned long long* fault, int64_t num_slots,
    int64_t num_remap, int num_tokens, int num_kv_heads, int head_dim, int64_t key_token_stride,
    int64_t key_head_stride, int64_t value_token_stride, int64_t value_head_stride, float k_scale,
    float v_scale, int layout, int block_size_log2, const Slots& source = Slots{}) {
  constexpr int X = FP8 ? 16 : 8;
  constexpr int SIZE = FP8 ? 1 : 2;
  using Vec = typename Raw<SIZE>::vec;
  TokenGroup g;
  // A thread past the grid's end moves nothing but stays: the staged stores
  // below take every lane of the warp.
  if (!token_group<N>(num_tokens, num_kv_heads, head_dim, &g)) g = TokenGroup{0, 0, 0, 0, (int)(threadIdx.x & 1)};

  int64_t slot[N];
  if constexpr (Slots::kMapped) {
    resolve_slots(g.t0, g.n, slot_mapping, slot_remap, num_remap, num_slots, fault, slot);
  } else {
    source.resolve(g.t0, g.n, slot);
  }
  // Every load is issued before the first conversion (fp8) and store: the
  // loads of skipped tokens are predicated off, not branched around, so no
  // token's conversion waits between two tokens' loads.
  uint4 kin[N], vin[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const int64_t t = g.t0 + j;
    kin[j] = vin[j] = make_uint4(0u, 0u, 0u, 0u);
    if (slot[j] >= 0) {
      if constexpr (KEYS) kin[j] = load8(key + t * key_token_stride + g.h * key_head_stride + g.d);
      vin[j] = load8(value + t * value_token_stride + g.h * value_head_stride + g.d);
    }
  }
  const E4M3Divisor kdiv = e4m3_divisor(k_scale), vdiv = e4m3_divisor(v_scale);  // fp8 only
  Vec k[N], v[N];
#pragma unroll
  for (int j = 0; j < N; ++j) {
    k[j] = to_cache<In, FP8>(kin[j], kdiv);
    v[j] = to_cache<In, FP8>(vin[j], vdiv);
  }

  int ks, vs;
  if constexpr (N == kGroupTokens) {
    const unsigned mask = pair_mask();
    const bool run = page_run(slot, g.n, layout, block_size_log2);
    const bool pair = pair_run(run, slot[0], g.p, block_size_log2, mask);
    if constexpr (!FP8) {
      // 16-bit caches, head_dim a power of two (so a group never straddles
      // warps): page runs go through shared memory, see store_pair_tiles.
      if (!flash_rows(layout) && (head_dim & (head_dim - 1)) == 0 && __any_sync(0xffffffffu, pair)) {
        store_pair_tiles<X, KEYS>(k, v, pair, slot[0] - (int64_t)g.p * kGroupTokens, g, key_cache, value_cache, layout,
                            num_kv_heads, head_dim, block_size_log2);
        if (pair) return;
      }
    }
    if (pair) {
      // A 16-row run: store i writes pieces 2i and 2i+1 of the run from lanes
      // 0 and 1, one whole 32-byte sector (16-bit; fp8 with the neighbour
      // piece's pair). K rows of consecutive slots are adjacent, X apart.
      if constexpr (KEYS) {
        const int64_t start = slot[0] - (int64_t)g.p * kGroupTokens;
        Vec out[kGroupTokens];
        pair_interleave(k, g.p, mask, out);
        const int64_t kat = cache_place<X>(layout, false, start, g.h, g.d, num_kv_heads, head_dim, block_size_log2, &ks);
#pragma unroll
        for (int i = 0; i < kGroupTokens; ++i) store8<SIZE>(key_cache, kat + (int64_t)(2 * i + g.p) * X, 1, out[i]);
      }
      Vec col[kGroupTokens];
      transpose8x8(v, col);
      // Element row d+e of each lane's 8 rows is contiguous. x-split: the
      // page's row is 16 rows and lane p writes half p in store e (16-bit: one
      // whole sector). Shuffle: lane p writes its own x-block (trading pieces
      // so that a store writes whole sectors runs slower: 26.6% against
      // 39.6% of copy, H200, 2026-12-02).
      const int64_t vat = cache_place<X>(layout, true, slot[0], g.h, g.d, num_kv_heads, head_dim, block_size_log2, &vs);
#pragma unroll
      for (int e = 0; e < 8; ++e) store8<SIZE>(value_cache, vat + (int64_t)e * vs, 1, col[e]);
      return;
    }
    if (run) {
      // K rows of consecutive slots are adjacent: 8 pieces, one per token.
      if constexpr (KEYS) {
#pragma unroll
        for (int j = 0; j < kGroupTokens; ++j)
          store8<SIZE>(key_cache,
                       cache_place<X>(layout, false, slot[j], g.h, g.d, num_kv_heads, head_dim, block_size_log2, &ks),
                       1, k[j]);
      }
      // Element d+e of the 8 rows starts at vat + e·vs and is contiguous.
      Vec col[kGroupTokens];
      transpose8x8(v, col);
      const int64_t vat = cache_place<X>(layout, true, slot[0], g.h, g.d, num_kv_heads, head_dim, block_size_log2, &vs);
#pragma unroll
      for (int e = 0; e < 8; ++e) store8<SIZE>(value_cache, vat + (int64_t)e * vs, 1, col[e]);
      return;
    }
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    if (slot[j] < 0) continue;
    int64_t kat = 0;
    if constexpr (KEYS) kat = cache_place<X>(layout, false, slot[j], g.h, g.d, num_kv_heads, head_dim, block_size_log2, &ks);
    const int64_t vat = cache_place<X>(layout, true, slot[j], g.h, g.d, num_kv_heads, head_dim, block_size_log2, &vs);
    if constexpr (KEYS) store8<SIZE>(key_cache, kat, ks, k[j]);
    store8<SIZE>(value_cache, vat, vs, v[j]);
  }
}

// The page path (x-split and shuffle layouts, block_size ≥ x, appends that
// cover much of the cache: dispatch.PlanAppend). Tokens with scattered
// slots (decode steps, or a batch's tokens in shuffled pages) share pages
// with tokens far from them in the batch, so no thread or block sees a
// page's rows together, and token-minor V leaves 2 bytes per 32-byte
// sector. Two launches group them by page without scratch memory:
// cache_claim_slots writes each token's index into the first 4 bytes of
// its slot's K piece (head 0, elements 0 …), which the second launch
// overwrites anyway; cache_append_pages then takes one page per block,
// reads the page's claims, keeps those whose token really resolves to that
// slot (a slot nobody claimed holds old K bytes, which cannot pass: a token
// that resolves there would have claimed it), and writes the page's tiles
// of every head in whole 16-byte pieces, K straight from the tokens' rows
// and V through shared memory (a store is x consecutive rows of one
// element). Rows nobody claims keep their bytes. Two tokens with one slot:
// one of them is written, as in the token path.

// cache_claim_slots: thread t claims token t's slot (faults recorded here).
template <int SIZE>
__device__ __forceinline__ void cache_claim_slots(void* __restrict__ key_cache, const int64_t* __restrict__ slot_mapping,
                                                  const int64_t* __restrict__ slot_remap, unsigned long long* fault,
                                                  int64_t num_slots, int64_t num_remap, int num_tokens,
                                                  int num_kv_heads, int head_dim, int layout, int block_size_log2) {
  constexpr int X = 16 / SIZE;
  const int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= num_tokens) return;
  const int64_t slot = resolve_slot(t, slot_mapping, slot_remap, num_remap, num_slots, fault);
  if (slot < 0) return;
  int st;
  const int64_t at = cache_place<X>(layout, false, slot, 0, 0, num_kv_heads, head_dim, block_size_log2, &st);
  *reinterpret_cast<int*>(static_cast<unsigned char*>(key_cache) + at * SIZE) = (int)t;
}

// kPageUnroll: how many 16-byte K pieces a page-block thread loads before
// it stores them (more loads in flight per thread).
constexpr int kPageUnroll = 8;

// cache_append_pages: block b writes page b (see above). In both layouts a
// page's tiles, head by head, are NumKVHeads·head_dim·bs contiguous
// elements from first·NumKVHeads·head_dim (first: the page's first slot),
// so every place is that base plus an offset made of shifts (head_dim, bs
// and X are powers of two). No shared memory but the claims: a thread
// loads the X rows of one 8-element column of V (16 bytes of X tokens'
// input rows), transposes them in registers and stores 8 pieces of X rows
// of one element each.
template <typename In, bool FP8>
__device__ __forceinline__ void cache_append_pages(
    const In* __restrict__ key, const In* __restrict__ value, void* __restrict__ key_cache,
    void* __restrict__ value_cache, const int64_t* __restrict__ slot_mapping,
    const int64_t* __restrict__ slot_remap, int64_t num_slots, int64_t num_remap, int num_tokens, int num_kv_heads,
    int head_dim, int64_t key_token_stride, int64_t key_head_stride, int64_t value_token_stride,
    int64_t value_head_stride, float k_scale, float v_scale, int layout, int block_size_log2) {
  constexpr int X = FP8 ? 16 : 8;  // cache elements (V: rows) per 16-byte piece
  constexpr int XL = FP8 ? 4 : 3;  // log2(X)
  constexpr int SIZE = FP8 ? 1 : 2;
  constexpr int U = kPageUnroll;
  __shared__ int owner[256];  // block_size ≤ 256
  const int bs = 1 << block_size_log2;
  const int64_t first = (int64_t)blockIdx.x << block_size_log2;
  const int tid = threadIdx.x, nt = blockDim.x;
  bool mine = false;
  for (int o = tid; o < bs; o += nt) {
    int st;
    const int64_t at = cache_place<X>(layout, false, first + o, 0, 0, num_kv_heads, head_dim, block_size_log2, &st);
    const int c = *reinterpret_cast<const int*>(static_cast<const unsigned char*>(key_cache) + at * SIZE);
    const bool ok = c >= 0 && c < num_tokens &&
                    resolve_slot(c, slot_mapping, slot_remap, num_remap, num_slots, nullptr) == first + o;
    owner[o] = ok ? c : -1;
    mine |= ok;
  }
  if (!__syncthreads_or(mine)) return;  // every claim is read before any K is written
  const E4M3Divisor kdiv = e4m3_divisor(k_scale), vdiv = e4m3_divisor(v_scale);  // fp8 only
  const int dl = 31 - __clz(head_dim);  // log2(head_dim)
  const int64_t page = first * num_kv_heads * head_dim;
  unsigned char* kc = static_cast<unsigned char*>(key_cache) + page * SIZE;
  unsigned char* vc = static_cast<unsigned char*>(value_cache) + page * SIZE;

  // K: piece q of the page in memory order, [heads][head_dim/X][bs] (X
  // elements each): o = q % bs, c = q / bs % (head_dim/X), h the rest. U
  // pieces are loaded before any is stored; an fp8 piece is two 16-byte
  // pieces of input.
  const int kcl = dl - XL;  // log2(head_dim/X)
  const int kitems = num_kv_heads << (kcl + block_size_log2);
  for (int q0 = tid; q0 < kitems; q0 += U * nt) {
    uint4 in[U], in2[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int q = q0 + u * nt;
      const int t = q < kitems ? owner[q & (bs - 1)] : -1;
      if (t < 0) continue;
      const int c = (q >> block_size_log2) & ((1 << kcl) - 1), h = q >> (kcl + block_size_log2);
      const In* src = key + (int64_t)t * key_token_stride + (int64_t)h * key_head_stride + c * X;
      in[u] = load8(src);
      if constexpr (FP8) in2[u] = load8(src + 8);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int q = q0 + u * nt;
      if (q >= kitems || owner[q & (bs - 1)] < 0) continue;
      uint4 out = in[u];
      if constexpr (FP8) {
        const uint2 a = to_cache<In, true>(in[u], kdiv), b = to_cache<In, true>(in2[u], kdiv);
        out = make_uint4(a.x, a.y, b.x, b.y);
      }
      *reinterpret_cast<uint4*>(kc + (int64_t)q * 16) = out;
    }
  }

  // V: item (h, og, c), c fastest (the lanes of a row group read 16-byte
  // pieces of the same input rows): rows og·X … og·X+X-1, elements 8c …
  // 8c+7, transposed in registers into 8 pieces, element 8c+e's X rows
  // each. Piece (h, og, d) is at x-split [heads][head_dim][bs] (h·head_dim
  // + d)·bs + og·X, shuffle [heads][bs/X][head_dim][X] ((h·bs/X + og)·
  // head_dim + d)·X. A lane's 8 pieces are 8 places apart (x-split) or
  // adjacent (shuffle), so a warp stores through shared memory: its 256
  // pieces land lane-major, then store k writes pieces 32k … 32k+31 of
  // the warp's pieces in memory order (shuffle: lane-major; x-split: og
  // fastest, then e, c, head), whole sectors in runs of 32 pieces or of
  // the og groups a warp holds. A group with unclaimed rows writes its
  // claimed rows alone, element by element.
  __shared__ uint4 vstage[kAppendWarps][32 * 8];
  const int vcl = dl - 3;               // log2(head_dim/8)
  const int gl = block_size_log2 - XL;  // log2(bs/X)
  const int vitems = num_kv_heads << (vcl + gl);
  const int lane = tid & 31, warp = tid >> 5;
  const int wl = 5 - vcl;            // log2 of the (h, og) groups a warp holds (vcl ≤ 5)
  const int opl = min(wl, gl);       // log2 of the og groups of one head a warp holds
  for (int v0 = warp * 32; v0 < vitems; v0 += nt) {  // whole warps (nt is a multiple of 32)
    const int v = v0 + lane;
    const int c = v & ((1 << vcl) - 1), og = (v >> vcl) & ((1 << gl) - 1), h = v >> (vcl + gl);
    int t[X];
    bool all = v < vitems, any = false;
#pragma unroll
    for (int j = 0; j < X; ++j) {
      t[j] = v < vitems ? owner[og * X + j] : -1;
      all &= t[j] >= 0;
      any |= t[j] >= 0;
    }
    uint4 rows[X];
#pragma unroll
    for (int j = 0; j < X; ++j) {
      rows[j] = make_uint4(0u, 0u, 0u, 0u);
      if (t[j] >= 0) rows[j] = load8(value + (int64_t)t[j] * value_token_stride + (int64_t)h * value_head_stride + c * 8);
    }
    // col[e]: rows 0-7 of element 8c+e (fp8: and colb[e], rows 8-15).
    uint4 col[8], colb[8];
    transpose8x8(reinterpret_cast<const uint4(&)[8]>(rows[0]), col);
    if constexpr (FP8) transpose8x8(reinterpret_cast<const uint4(&)[8]>(rows[8]), colb);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      uint4 out = col[e];
      if constexpr (FP8) {
        const uint2 a = to_cache<In, true>(col[e], vdiv), b = to_cache<In, true>(colb[e], vdiv);
        out = make_uint4(a.x, a.y, b.x, b.y);
      }
      vstage[warp][stage_index(8 * lane + e)] = out;
    }
    const int state = any ? (all ? 2 : 1) : 0;  // rows this lane's group writes: none, some, all
    __syncwarp();
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int m = 32 * k + lane;  // in memory order
      int sl, e;                    // the piece's lane and element
      if (layout == kLayoutXSplit) {
        const int ol = m & ((1 << opl) - 1), rest = m >> opl;
        e = rest & 7;
        const int cl = (rest >> 3) & ((1 << vcl) - 1), hl = rest >> (3 + vcl);
        sl = (((hl << opl) + ol) << vcl) + cl;
      } else {
        sl = m >> 3;
        e = m & 7;
      }
      const int st = __shfl_sync(0xffffffffu, state, sl);
      if (st == 0) continue;
      const int sv = v0 + sl;
      const int sc = sv & ((1 << vcl) - 1), sog = (sv >> vcl) & ((1 << gl) - 1), sh = sv >> (vcl + gl);
      const int d = 8 * sc + e;
      const int64_t at = layout == kLayoutXSplit ? (((int64_t)sh << dl) + d) * bs + sog * X
                                                 : ((((int64_t)sh << gl) + sog) * head_dim + d) * X;
      unsigned char* dst = vc + at * SIZE;
      const uint4 out = vstage[warp][stage_index(8 * sl + e)];
      if (st == 2) {
        *reinterpret_cast<uint4*>(dst) = out;
        continue;
      }
      const unsigned char* bytes = reinterpret_cast<const unsigned char*>(&out);
#pragma unroll
      for (int j = 0; j < X; ++j) {
        if (owner[sog * X + j] >= 0) {
#pragma unroll
          for (int k2 = 0; k2 < SIZE; ++k2) dst[j * SIZE + k2] = bytes[j * SIZE + k2];
        }
      }
    }
    __syncwarp();  // the stage is read before the next items land
  }
}

template <int SIZE>
__device__ __forceinline__ void cache_gather(void* __restrict__ key_out, void* __restrict__ value_out,
                                             const void* __restrict__ key_cache,
                                             const void* __restrict__ value_cache,
                                             const int64_t* __restrict__ slots, unsigned long long* fault,
                                             int64_t num_slots, int num_tokens, int num_kv_heads,
                                             int head_dim, int layout, int block_size_log2) {
  constexpr int X = 16 / SIZE;
  using Vec = typename Raw<SIZE>::vec;
  TokenGroup g;
  if (!token_group(num_tokens, num_kv_heads, head_dim, &g)) return;

  int64_t slot[kGroupTokens];
  // All slots are loaded before the first branch on one.
#pragma unroll
  for (int j = 0; j < kGroupTokens; ++j) slot[j] = j < g.n ? slots[g.t0 + j] : -1;
#pragma unroll
  for (int j = 0; j < kGroupTokens; ++j) {
    if (slot[j] >= num_slots) {
      record_fault(fault, kFaultSlotBeyondCache, g.t0 + j, slot[j], num_slots);
      slot[j] = -1;
    }
  }
  Vec k[kGroupTokens], v[kGroupTokens];
  int ks, vs;
  if (page_run(slot, g.n, layout, block_size_log2)) {
    Vec col[kGroupTokens];
    const int64_t vat = cache_place<X>(layout, true, slot[0], g.h, g.d, num_kv_heads, head_dim, block_size_log2, &vs);
#pragma unroll
    for (int e = 0; e < 8; ++e) col[e] = load8_raw<SIZE>(value_cache, vat + (int64_t)e * vs, 1);
#pragma unroll
    for (int j = 0; j < kGroupTokens; ++j)
      k[j] = load8_raw<SIZE>(key_cache,
                             cache_place<X>(layout, false, slot[j], g.h, g.d, num_kv_heads, head_dim, block_size_log2, &ks),
                             1);
    transpose8x8(col, v);
  } else {
#pragma unroll
    for (int j = 0; j < kGroupTokens; ++j) {
      if (slot[j] < 0) continue;
      const int64_t kat = cache_place<X>(layout, false, slot[j], g.h, g.d, num_kv_heads, head_dim, block_size_log2, &ks);
      const int64_t vat = cache_place<X>(layout, true, slot[j], g.h, g.d, num_kv_heads, head_dim, block_size_log2, &vs);
      k[j] = load8_raw<SIZE>(key_cache, kat, ks);
      v[j] = load8_raw<SIZE>(value_cache, vat, vs);
    }
  }
#pragma unroll
  for (int j = 0; j < kGroupTokens; ++j) {
    if (slot[j] < 0) continue;
    const int64_t out = ((g.t0 + j) * num_kv_heads + g.h) * head_dim + g.d;
    store8<SIZE>(key_out, out, 1, k[j]);
    store8<SIZE>(value_out, out, 1, v[j]);
  }
}

}  // namespace pkv

// PKV_APPEND_PARAMS is the parameter list of an append entry, token path
// or page path (cacheAppendParams in cache.go).
#define PKV_APPEND_PARAMS(In)                                                                        \
  const In* key, const In* value, void* key_cache, void* value_cache, const int64_t* slot_mapping,  \
      const int64_t* slot_remap, unsigned long long* fault, int64_t num_slots, int64_t num_remap,   \
      int num_tokens, int num_kv_heads, int head_dim, int64_t key_token_stride,                     \
      int64_t key_head_stride, int64_t value_token_stride, int64_t value_head_stride, float k_scale, \
      float v_scale, int layout, int block_size_log2

// PKV_CACHE_APPEND_TOKENS defines an append entry whose threads move N
// tokens each; the host plans its grid for N (dispatch.PlanAppend) and
// launches N < kGroupTokens only for the flash layout.
#define PKV_CACHE_APPEND(name, In, FP8) PKV_CACHE_APPEND_TOKENS(name, In, FP8, pkv::kGroupTokens)
#define PKV_CACHE_APPEND_TOKENS(name, In, FP8, N)                                                \
  extern "C" __global__ void __launch_bounds__(pkv::kAppendThreads) name(                      \
      PKV_APPEND_PARAMS(In)) {                                                                   \
    pkv::cache_append<In, FP8, N>(key, value, key_cache, value_cache, slot_mapping, slot_remap,  \
                               fault, num_slots, num_remap, num_tokens, num_kv_heads, head_dim,  \
                               key_token_stride, key_head_stride, value_token_stride,            \
                               value_head_stride, k_scale, v_scale, layout, block_size_log2);    \
  }

#define PKV_CACHE_GATHER(name, SIZE)                                                            \
  extern "C" __global__ void __launch_bounds__(pkv::kAppendThreads) name(                     \
      void* key_out, void* value_out, const void* key_cache, const void* value_cache,           \
      const int64_t* slots, unsigned long long* fault, int64_t num_slots, int num_tokens,       \
      int num_kv_heads, int head_dim, int layout, int block_size_log2) {                        \
    pkv::cache_gather<SIZE>(key_out, value_out, key_cache, value_cache, slots, fault, num_slots, \
                            num_tokens, num_kv_heads, head_dim, layout, block_size_log2);       \
  }

// PKV_CACHE_PAGES defines the page path's two entries for one input and
// cache dtype: <claim> (one thread per token, blocks of kAppendThreads) and
// <pages> (one block of kAppendThreads per page).
#define PKV_CACHE_PAGES(claim, pages, In, FP8)                                                      \
  extern "C" __global__ void __launch_bounds__(pkv::kAppendThreads) claim(                        \
      void* key_cache, const int64_t* slot_mapping, const int64_t* slot_remap, unsigned long long* fault, \
      int64_t num_slots, int64_t num_remap, int num_tokens, int num_kv_heads, int head_dim, int layout, \
      int block_size_log2) {                                                                         \
    pkv::cache_claim_slots<FP8 ? 1 : 2>(key_cache, slot_mapping, slot_remap, fault, num_slots, num_remap, \
                                        num_tokens, num_kv_heads, head_dim, layout, block_size_log2);  \
  }                                                                                                  \
  extern "C" __global__ void __launch_bounds__(pkv::kAppendThreads) pages(                        \
      PKV_APPEND_PARAMS(In)) {                                                                      \
    pkv::cache_append_pages<In, FP8>(key, value, key_cache, value_cache, slot_mapping, slot_remap,   \
                                     num_slots, num_remap, num_tokens, num_kv_heads, head_dim,       \
                                     key_token_stride, key_head_stride, value_token_stride,          \
                                     value_head_stride, k_scale, v_scale, layout, block_size_log2);  \
  }
