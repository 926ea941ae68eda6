// Prototype: paged varlen causal attention on sm_90a with wgmma (bf16, D=128).
// Standalone harness: correctness against a naive f32 kernel, timing.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cmath>
#include <vector>
#include <algorithm>
#include <random>
#include "wg_ops.cuh"

#if CUDA_VERSION < 12000  // compile checks with an older toolkit only: its cuda.h has no tensor maps
typedef struct alignas(64) { unsigned long long opaque[16]; } CUtensorMap;
enum { CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
       CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE };
static CUresult cuTensorMapEncodeTiled(CUtensorMap*, int, unsigned, void*, const cuuint64_t*, const cuuint64_t*,
                                       const cuuint32_t*, const cuuint32_t*, int, int, int, int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
#endif

constexpr int D = 128;
constexpr int CH = D / 8;  // 16-byte chunks a row

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1); } } while (0)

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wg_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }
template <int N>
__device__ __forceinline__ void fence_regs(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

__device__ __forceinline__ void fence_u32(uint32_t (&d)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(d[i])::"memory");
}

// Byte offset of 16-byte chunk c of row r in a tile of ROWS rows of D
// elements: 64-element column blocks of ROWS×128 bytes, each row's 8 chunks
// XOR-swizzled by r mod 8 (the 128-byte swizzle wgmma reads).
template <int ROWS>
__device__ __forceinline__ uint32_t sw128(int r, int c) {
  return (c >> 3) * (ROWS * 128) + r * 128 + (((c & 7) ^ (r & 7)) << 4);
}
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr >> 4) & 0x3FFF) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}
__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t*>(&h);
}

template <int NWG, int KEYS, int STAGES>
struct WgSmem {
  static constexpr int kRows = 64 * NWG;
  static constexpr int kQ = kRows * D * 2;
  static constexpr int kTile = KEYS * D * 2;
  static constexpr int kStage = 2 * kTile;
  static constexpr int kBytes = kQ + STAGES * kStage + 1024;  // + alignment slack
};

template <int KEYS>
__device__ __forceinline__ void wg_scores(float (&s)[KEYS / 2], uint32_t q_addr, uint32_t k_addr) {
#pragma unroll
  for (int ks = 0; ks < D / 16; ++ks) {
    const uint64_t da = make_desc(q_addr + (ks >> 2) * (64 * 128) + (ks & 3) * 32, 16, 1024);
    const uint64_t db = make_desc(k_addr + (ks >> 2) * (KEYS * 128) + (ks & 3) * 32, 16, 1024);
    if constexpr (KEYS == 64) wgmma_ss_n64(s, da, db, ks);
    else wgmma_ss_n128(s, da, db, ks);
  }
}

// grid: (tiles, num_kv_heads); block 128·NWG.
template <int NWG, int KEYS, bool OVERLAP>
__global__ void __launch_bounds__(128 * NWG) wg_varlen(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kc, const __nv_bfloat16* __restrict__ vc,
    const int* __restrict__ block_tables, const int* __restrict__ cu, const int* __restrict__ pos_offsets,
    const int* __restrict__ tile_seq, const int* __restrict__ tile_row0, __nv_bfloat16* __restrict__ out,
    int num_q_heads, int num_kv_heads, int block_size, int max_blocks, float scale, int causal, int noload) {
  constexpr int STAGES = OVERLAP ? 3 : 2;
  using S = WgSmem<NWG, KEYS, STAGES>;
  constexpr int ROWS = S::kRows;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
  const uint32_t q_s = sbase;
  const uint32_t kv_s = sbase + S::kQ;

  const int tid = threadIdx.x, wg = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31;
  const int kvh = blockIdx.y, G = num_q_heads / num_kv_heads;
  const int seq = tile_seq[blockIdx.x], p0 = tile_row0[blockIdx.x];
  const int q0 = cu[seq], q_len = cu[seq + 1] - q0, pos = pos_offsets[seq];
  const int kv_len = pos + q_len, rows_total = q_len * G;
  const int p_last = min(p0 + ROWS - 1, rows_total - 1);
  const int n_keys = causal ? pos + p_last / G + 1 : kv_len;
  const int n_tiles = (n_keys + KEYS - 1) / KEYS;
  const int* bt = block_tables + (size_t)seq * max_blocks;

  // Q rows: NWG tiles of 64 rows, canonical layout each.
#pragma unroll
  for (int i = 0; i < ROWS * CH / (128 * NWG); ++i) {
    const int idx = tid + i * 128 * NWG, r = idx / CH, c = idx % CH;
    const int p = p0 + r, tok = p / G, h = kvh * G + p % G;
    const bool ok = p < rows_total;
    const __nv_bfloat16* src = q + ((size_t)(q0 + (ok ? tok : 0)) * num_q_heads + h) * D + c * 8;
    cp_async16(q_s + (r >> 6) * (64 * D * 2) + sw128<64>(r & 63, c), ok ? src : q, ok ? 16 : 0);
  }
  auto load_tile = [&](int j, int stage) {
    const uint32_t ks = kv_s + stage * S::kStage, vs = ks + S::kTile;
#pragma unroll
    for (int i = 0; i < KEYS * CH / (128 * NWG); ++i) {
      const int idx = tid + i * 128 * NWG, r = idx / CH, c = idx % CH;
      const int key = j * KEYS + r;
      const bool ok = key < n_keys;
      const int page = ok ? bt[key / block_size] : 0;
      const size_t off = (((size_t)page * block_size + key % block_size) * num_kv_heads + kvh) * D + c * 8;
      cp_async16(ks + sw128<KEYS>(r, c), ok ? kc + off : kc, ok ? 16 : 0);
      cp_async16(vs + sw128<KEYS>(r, c), ok ? vc + off : vc, ok ? 16 : 0);
    }
  };
  load_tile(0, 0);
  cp_commit();

  // This thread's two rows (of its warpgroup's 64): r0 = 16·warp + lane/4, r0 + 8.
  const int r0 = wg * 64 + warp * 16 + (lane >> 2);
  int lim[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int p = p0 + r0 + 8 * e;
    lim[e] = p < rows_total ? (causal ? pos + p / G : kv_len - 1) : kv_len - 1;
  }
  const int lim_min = causal ? pos + p0 / G : kv_len - 1;
  const float q_mul = scale * 1.4426950408889634f;
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const uint32_t q_wg = q_s + wg * (64 * D * 2);

  // softmax folds scores s of tile j into m, l (rescaled) and P fragments
  // pa; returns the factor the output rows must be rescaled by in alpha.
  auto softmax = [&](const float (&s)[KEYS / 2], int j, uint32_t (&pa)[KEYS / 16][4], float (&alpha)[2]) {
    const bool mask = (j + 1) * KEYS - 1 > lim_min;
    float mx[2] = {-INFINITY, -INFINITY};
    float sx[KEYS / 2];
#pragma unroll
    for (int i = 0; i < KEYS / 2; ++i) {
      const int e = (i >> 1) & 1;
      float x = s[i] * q_mul;
      if (mask) {
        const int key = j * KEYS + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
        if (key > lim[e]) x = -INFINITY;
      }
      sx[i] = x;
      mx[e] = fmaxf(mx[e], x);
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffff, mx[e], 1));
      mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffff, mx[e], 2));
      const float mn = fmaxf(m[e], mx[e]);
      alpha[e] = exp2f(m[e] - mn);
      m[e] = mn;
      l[e] *= alpha[e];
    }
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk) {
      float p[8];
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int e = (t >> 1) & 1;
        p[t] = exp2f(sx[8 * kk + t] - m[e]);
        l[e] += p[t];
      }
      pa[kk][0] = pack_bf16(p[0], p[1]);
      pa[kk][1] = pack_bf16(p[2], p[3]);
      pa[kk][2] = pack_bf16(p[4], p[5]);
      pa[kk][3] = pack_bf16(p[6], p[7]);
    }
  };
  auto issue_pv = [&](uint32_t (&pa)[KEYS / 16][4], uint32_t vs) {
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk) wgmma_rs_n128(o, pa[kk], make_desc(vs + kk * 16 * 128, KEYS * 128, 1024));
  };
  if constexpr (!OVERLAP) {
  for (int j = 0; j < n_tiles; ++j) {
    const int stage = j & 1;
    if (j + 1 < n_tiles) {
      if (!noload) load_tile(j + 1, stage ^ 1);
      cp_commit();
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    fence_async_smem();
    __syncthreads();
    const uint32_t ks = kv_s + stage * S::kStage, vs = ks + S::kTile;
    float s[KEYS / 2];
    wg_fence();
    wg_scores<KEYS>(s, q_wg, ks);
    wg_commit();
    wg_wait<0>();
    fence_regs(s);
    uint32_t pa[KEYS / 16][4];
    float alpha[2];
    softmax(s, j, pa, alpha);
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] *= alpha[(i >> 1) & 1];
    wg_fence();
    issue_pv(pa, vs);
    wg_commit();
    wg_wait<0>();
    fence_regs(o);
    __syncthreads();
  }
  } else {
    // Three stages: tile j's S = Q·Kᵀ runs beside tile j−1's O += P·V.
    if (n_tiles > 1) {
      load_tile(1, 1);
      cp_commit();
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    fence_async_smem();
    __syncthreads();
    uint32_t pa[KEYS / 16][4];
    {
      float s[KEYS / 2];
      wg_fence();
      wg_scores<KEYS>(s, q_wg, kv_s);
      wg_commit();
      wg_wait<0>();
      fence_regs(s);
      float alpha[2];
      softmax(s, 0, pa, alpha);
    }
    int stage_prev = 0;
    for (int j = 1; j < n_tiles; ++j) {
      const int stage = stage_prev == STAGES - 1 ? 0 : stage_prev + 1;
      const int stage_next = stage == STAGES - 1 ? 0 : stage + 1;
      __syncthreads();  // every warpgroup is done with the stage tile j+1 goes to
      if (j + 1 < n_tiles) {
        if (!noload) load_tile(j + 1, stage_next);
        cp_commit();
        cp_wait<1>();
      } else {
        cp_wait<0>();
      }
      fence_async_smem();
      __syncthreads();
      const uint32_t ks = kv_s + stage * S::kStage;
      const uint32_t vs_prev = kv_s + stage_prev * S::kStage + S::kTile;
      float s[KEYS / 2];
      wg_fence();
      wg_scores<KEYS>(s, q_wg, ks);
      wg_commit();
      issue_pv(pa, vs_prev);
      wg_commit();
      wg_wait<1>();
      fence_regs(s);
      uint32_t pn[KEYS / 16][4];
      float alpha[2];
      softmax(s, j, pn, alpha);
      wg_wait<0>();
      fence_regs(o);
#pragma unroll
      for (int kk = 0; kk < KEYS / 16; ++kk) fence_u32(pa[kk]);
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= alpha[(i >> 1) & 1];
#pragma unroll
      for (int kk = 0; kk < KEYS / 16; ++kk)
#pragma unroll
        for (int x = 0; x < 4; ++x) pa[kk][x] = pn[kk][x];
      stage_prev = stage;
    }
    wg_fence();
    issue_pv(pa, kv_s + stage_prev * S::kStage + S::kTile);
    wg_commit();
    wg_wait<0>();
    fence_regs(o);
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    l[e] += __shfl_xor_sync(0xffffffff, l[e], 1);
    l[e] += __shfl_xor_sync(0xffffffff, l[e], 2);
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int p = p0 + r0 + 8 * e;
    if (p >= rows_total) continue;
    const int tok = p / G, h = kvh * G + p % G;
    __nv_bfloat16* dst = out + ((size_t)(q0 + tok) * num_q_heads + h) * D;
    const float inv = 1.f / l[e];
#pragma unroll
    for (int n8 = 0; n8 < 16; ++n8) {
      const int col = 8 * n8 + 2 * (lane & 3);
      *reinterpret_cast<uint32_t*>(dst + col) = pack_bf16(o[4 * n8 + 2 * e] * inv, o[4 * n8 + 2 * e + 1] * inv);
    }
  }
}


// ---- warp-specialized: producer warpgroup (cp.async → ring, mbarriers), two consumer warpgroups.
__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Named barriers of 256 threads (both consumer warpgroups): a warpgroup
// syncs on its own before issuing its products and arrives on the
// other's after, so their products alternate with their softmaxes (PP).
__device__ __forceinline__ void named_sync(int id) { asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void named_arrive(int id) { asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory"); }

__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// tma_load_3d copies the box at (c0, c1, c2) of tensor map tm into shared
// memory at dst, completing bytes on mbarrier bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* tm, int c0, int c1, int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tm)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}

template <int KEYS, int ST>
struct WsSmem {
  static constexpr int kQ = 128 * D * 2;
  static constexpr int kTile = KEYS * D * 2;
  static constexpr int kStage = 2 * kTile;
  static constexpr int kBars = 2 * ST * 8;
  static constexpr int kBytes = kQ + ST * kStage + 1024 + kBars;
};

// setmaxnreg moves registers between warpgroups (REG): the producer gives
// its own back, the consumers take them.
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }

// QKA: each consumer issues tile j+1's S = Q·Kᵀ before tile j's softmax,
// then tile j's P·V, and waits for both (no P held in registers across
// an in-flight wgmma, which ptxas may reuse and then wait for). REG:
// setmaxnreg, producer 40 registers, consumers 232.
template <int KEYS, int ST, bool TMA, bool PP = false, bool QKA = false, bool REG = false>
__global__ void __launch_bounds__(384, 1) wg_ws(
    const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ kc, const __nv_bfloat16* __restrict__ vc,
    const int* __restrict__ block_tables, const int* __restrict__ cu, const int* __restrict__ pos_offsets,
    const int* __restrict__ tile_seq, const int* __restrict__ tile_row0, __nv_bfloat16* __restrict__ out,
    int num_q_heads, int num_kv_heads, int block_size, int max_blocks, float scale, int causal, int noload,
    const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv) {
  static_assert(!REG || TMA, "setmaxnreg with the one-thread TMA producer only");
  using S = WsSmem<KEYS, ST>;
  constexpr int ROWS = 128;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sbase = (uint32_t)__cvta_generic_to_shared(smem);
  const uint32_t q_s = sbase;
  const uint32_t kv_s = sbase + S::kQ;
  const uint32_t full = kv_s + ST * S::kStage;  // ST mbarriers, then ST empty ones
  const uint32_t empty = full + ST * 8;

  const int tid = threadIdx.x, role = tid >> 7;  // 0: producer, 1-2: consumers
  const int kvh = blockIdx.y, G = num_q_heads / num_kv_heads;
  const int seq = tile_seq[blockIdx.x], p0 = tile_row0[blockIdx.x];
  const int q0 = cu[seq], q_len = cu[seq + 1] - q0, pos = pos_offsets[seq];
  const int kv_len = pos + q_len, rows_total = q_len * G;
  const int p_last = min(p0 + ROWS - 1, rows_total - 1);
  const int n_keys = causal ? pos + p_last / G + 1 : kv_len;
  const int n_tiles = (n_keys + KEYS - 1) / KEYS;
  const int* bt = block_tables + (size_t)seq * max_blocks;

  if (tid == 0) {
    for (int s = 0; s < ST; ++s) {
      mbar_init(full + 8 * s, TMA ? 1 : 128);
      mbar_init(empty + 8 * s, 256);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  // Q: every thread.
  for (int idx = tid; idx < ROWS * CH; idx += 384) {
    const int r = idx / CH, c = idx % CH;
    const int p = p0 + r, tok = p / G, h = kvh * G + p % G;
    const bool ok = p < rows_total;
    const __nv_bfloat16* src = q + ((size_t)(q0 + (ok ? tok : 0)) * num_q_heads + h) * D + c * 8;
    cp_async16(q_s + (r >> 6) * (64 * D * 2) + sw128<64>(r & 63, c), ok ? src : q, ok ? 16 : 0);
  }
  if constexpr (TMA) {
    for (int i = tid; i < ST * S::kStage / 16; i += 384)
      *reinterpret_cast<uint4*>(smem + S::kQ + i * 16) = make_uint4(0, 0, 0, 0);
  }
  cp_commit();
  cp_wait<0>();
  fence_async_smem();
  __syncthreads();

  if (TMA && role == 0) {
    if constexpr (REG) setmaxnreg_dec<40>();
    // Producer: one thread; each tile is KEYS/block_size pages, each page
    // of each column block one box of block_size rows of this KV head.
    if (tid != 0) return;
    const int pages = KEYS / block_size;
    for (int j = 0; j < n_tiles; ++j) {
      const int stage = j % ST;
      if (j >= ST) mbar_wait(empty + 8 * stage, ((j / ST) - 1) & 1);
      const uint32_t ks = kv_s + stage * S::kStage, vs = ks + S::kTile;
      const uint32_t bar = full + 8 * stage;
      int live = 0;
      for (int p = 0; p < pages; ++p) live += j * KEYS + p * block_size < n_keys;
      if (noload && j >= ST) live = 0;
      mbar_expect(bar, (uint32_t)(live * 4 * block_size * 128));
      for (int p = 0; p < live; ++p) {
        const int row = __ldg(bt + (j * KEYS) / block_size + p) * block_size;
#pragma unroll
        for (int cb = 0; cb < D / 64; ++cb) {
          const uint32_t at = cb * (KEYS * 128) + p * block_size * 128;
          tma_load_3d(ks + at, &tmk, cb * 64, kvh, row, bar);
          tma_load_3d(vs + at, &tmv, cb * 64, kvh, row, bar);
        }
      }
    }
    return;
  }
  if (role == 0) {
    // Producer: thread t copies chunks t, t+128, ... of each K and V tile.
    const int t = tid;
    auto issue = [&](int j) {
      const int stage = j % ST;
      const uint32_t ks = kv_s + stage * S::kStage, vs = ks + S::kTile;
#pragma unroll
      for (int i = 0; i < KEYS * CH / 128; ++i) {
        const int idx = t + i * 128, r = idx / CH, c = idx % CH;
        const int key = j * KEYS + r;
        const bool ok = key < n_keys;
        const int page = ok ? __ldg(bt + key / block_size) : 0;
        const size_t off = (((size_t)page * block_size + key % block_size) * num_kv_heads + kvh) * D + c * 8;
        cp_async16(ks + sw128<KEYS>(r, c), ok ? kc + off : kc, ok ? 16 : 0);
        cp_async16(vs + sw128<KEYS>(r, c), ok ? vc + off : vc, ok ? 16 : 0);
      }
      cp_commit();
    };
    for (int j = 0; j < n_tiles; ++j) {
      if (j >= ST) mbar_wait(empty + 8 * (j % ST), ((j / ST) - 1) & 1);
      if (!noload || j < ST) issue(j);
      else cp_commit();
      if (j >= 1) {
        cp_wait<1>();
        fence_async_smem();
        mbar_arrive(full + 8 * ((j - 1) % ST));
      }
    }
    cp_wait<0>();
    fence_async_smem();
    mbar_arrive(full + 8 * ((n_tiles - 1) % ST));
    return;
  }

  if constexpr (REG) setmaxnreg_inc<232>();  // every consumer path starts here
  const int wg = role - 1, warp = (tid >> 5) & 3, lane = tid & 31;
  const int r0 = wg * 64 + warp * 16 + (lane >> 2);
  int lim[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int p = p0 + r0 + 8 * e;
    lim[e] = p < rows_total ? (causal ? pos + p / G : kv_len - 1) : kv_len - 1;
  }
  const int lim_min = causal ? pos + p0 / G : kv_len - 1;
  const float q_mul = scale * 1.4426950408889634f;
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const uint32_t q_wg = q_s + wg * (64 * D * 2);
  auto softmax = [&](const float (&s)[KEYS / 2], int j, uint32_t (&pa)[KEYS / 16][4], float (&alpha)[2]) {
    const bool mask = (j + 1) * KEYS - 1 > lim_min;
    float mx[2] = {-INFINITY, -INFINITY};
    float sx[KEYS / 2];
#pragma unroll
    for (int i = 0; i < KEYS / 2; ++i) {
      const int e = (i >> 1) & 1;
      float x = s[i] * q_mul;
      if (mask) {
        const int key = j * KEYS + 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
        if (key > lim[e]) x = -INFINITY;
      }
      sx[i] = x;
      mx[e] = fmaxf(mx[e], x);
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffff, mx[e], 1));
      mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffff, mx[e], 2));
      const float mn = fmaxf(m[e], mx[e]);
      alpha[e] = exp2f(m[e] - mn);
      m[e] = mn;
      l[e] *= alpha[e];
    }
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk) {
      float p[8];
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const int e = (t >> 1) & 1;
        p[t] = exp2f(sx[8 * kk + t] - m[e]);
        l[e] += p[t];
      }
      pa[kk][0] = pack_bf16(p[0], p[1]);
      pa[kk][1] = pack_bf16(p[2], p[3]);
      pa[kk][2] = pack_bf16(p[4], p[5]);
      pa[kk][3] = pack_bf16(p[6], p[7]);
    }
  };
  auto issue_pv = [&](uint32_t (&pa)[KEYS / 16][4], uint32_t vs) {
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk) wgmma_rs_n128(o, pa[kk], make_desc(vs + kk * 16 * 128, KEYS * 128, 1024));
  };
  if constexpr (QKA) {
    float s[KEYS / 2];
    mbar_wait(full, 0);
    wg_fence();
    wg_scores<KEYS>(s, q_wg, kv_s);
    wg_commit();
    wg_wait<0>();
    fence_regs(s);
    for (int j = 0; j < n_tiles; ++j) {
      const int stage = j % ST;
      float sn[KEYS / 2];
      if (j + 1 < n_tiles) {
        const int st1 = (j + 1) % ST;
        mbar_wait(full + 8 * st1, ((j + 1) / ST) & 1);
        wg_fence();
        wg_scores<KEYS>(sn, q_wg, kv_s + st1 * S::kStage);
        wg_commit();
      }
      uint32_t pq[KEYS / 16][4];
      float alpha[2];
      softmax(s, j, pq, alpha);
#pragma unroll
      for (int i = 0; i < 64; ++i) o[i] *= alpha[(i >> 1) & 1];
      wg_fence();
      issue_pv(pq, kv_s + stage * S::kStage + S::kTile);
      wg_commit();
      wg_wait<0>();
      fence_regs(o);
      fence_regs(sn);
      mbar_arrive(empty + 8 * stage);
#pragma unroll
      for (int i = 0; i < KEYS / 2; ++i) s[i] = sn[i];
    }
  } else {
  uint32_t pa[KEYS / 16][4];
  const int my_bar = 1 + wg, other_bar = 2 - wg;
  if (PP && wg == 1) named_arrive(other_bar);  // warpgroup 0 goes first
  mbar_wait(full, 0);
  {
    float s[KEYS / 2];
    if (PP) named_sync(my_bar);
    wg_fence();
    wg_scores<KEYS>(s, q_wg, kv_s);
    wg_commit();
    if (PP) named_arrive(other_bar);
    wg_wait<0>();
    fence_regs(s);
    float alpha[2];
    softmax(s, 0, pa, alpha);
  }
  for (int j = 1; j < n_tiles; ++j) {
    const int stage = j % ST, stage_prev = (j - 1) % ST;
    mbar_wait(full + 8 * stage, (j / ST) & 1);
    const uint32_t ks = kv_s + stage * S::kStage;
    const uint32_t vs_prev = kv_s + stage_prev * S::kStage + S::kTile;
    float s[KEYS / 2];
    if (PP) named_sync(my_bar);
    wg_fence();
    wg_scores<KEYS>(s, q_wg, ks);
    wg_commit();
    issue_pv(pa, vs_prev);
    wg_commit();
    if (PP) named_arrive(other_bar);
    wg_wait<1>();
    fence_regs(s);
    uint32_t pn[KEYS / 16][4];
    float alpha[2];
    softmax(s, j, pn, alpha);
    wg_wait<0>();
    fence_regs(o);
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk) fence_u32(pa[kk]);
    mbar_arrive(empty + 8 * stage_prev);
#pragma unroll
    for (int i = 0; i < 64; ++i) o[i] *= alpha[(i >> 1) & 1];
#pragma unroll
    for (int kk = 0; kk < KEYS / 16; ++kk)
#pragma unroll
      for (int x = 0; x < 4; ++x) pa[kk][x] = pn[kk][x];
  }
  if (PP) named_sync(my_bar);
  wg_fence();
  issue_pv(pa, kv_s + ((n_tiles - 1) % ST) * S::kStage + S::kTile);
  wg_commit();
  if (PP) named_arrive(other_bar);
  // Warpgroup 1's first arrive left one more on warpgroup 0's barrier.
  if (PP && wg == 0) named_sync(my_bar);
  wg_wait<0>();
  fence_regs(o);
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    l[e] += __shfl_xor_sync(0xffffffff, l[e], 1);
    l[e] += __shfl_xor_sync(0xffffffff, l[e], 2);
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int p = p0 + r0 + 8 * e;
    if (p >= rows_total) continue;
    const int tok = p / G, h = kvh * G + p % G;
    __nv_bfloat16* dst = out + ((size_t)(q0 + tok) * num_q_heads + h) * D;
    const float inv = 1.f / l[e];
#pragma unroll
    for (int n8 = 0; n8 < 16; ++n8) {
      const int col = 8 * n8 + 2 * (lane & 3);
      *reinterpret_cast<uint32_t*>(dst + col) = pack_bf16(o[4 * n8 + 2 * e] * inv, o[4 * n8 + 2 * e + 1] * inv);
    }
  }
}

// Naive reference: one block (128 threads = D) per (token, head); f32.
__global__ void ref_varlen(const __nv_bfloat16* q, const __nv_bfloat16* kc, const __nv_bfloat16* vc, const int* bt_all,
                           const int* cu, const int* pos_offsets, const int* tok_seq, float* out, int num_q_heads,
                           int num_kv_heads, int block_size, int max_blocks, float scale, int causal) {
  extern __shared__ float sc[];
  __shared__ float red[128];
  const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int seq = tok_seq[t], i = t - cu[seq], q_len = cu[seq + 1] - cu[seq], pos = pos_offsets[seq];
  const int kvh = h / (num_q_heads / num_kv_heads);
  const int n = causal ? pos + i + 1 : pos + q_len;
  const int* bt = bt_all + (size_t)seq * max_blocks;
  const float qd = __bfloat162float(q[((size_t)t * num_q_heads + h) * D + d]);
  for (int key = 0; key < n; ++key) {
    const size_t off = (((size_t)bt[key / block_size] * block_size + key % block_size) * num_kv_heads + kvh) * D;
    red[d] = qd * __bfloat162float(kc[off + d]);
    __syncthreads();
    for (int w = 64; w > 0; w >>= 1) {
      if (d < w) red[d] += red[d + w];
      __syncthreads();
    }
    if (d == 0) sc[key] = red[0] * scale;
    __syncthreads();
  }
  float mx = -INFINITY;
  for (int key = 0; key < n; ++key) mx = fmaxf(mx, sc[key]);
  float sum = 0.f, acc = 0.f;
  for (int key = 0; key < n; ++key) {
    const float p = expf(sc[key] - mx);
    sum += p;
    const size_t off = (((size_t)bt[key / block_size] * block_size + key % block_size) * num_kv_heads + kvh) * D;
    acc += p * __bfloat162float(vc[off + d]);
  }
  out[((size_t)t * num_q_heads + h) * D + d] = acc / sum;
}

struct Problem {
  std::vector<int> qlen, pos;
};

template <int NWG, int KEYS, bool OVERLAP, int WS = 0, bool TMA = false, bool PP = false, bool QKA = false, bool REG = false>
double run(const Problem& pr, bool check, int reps, std::mt19937& g, const char* name, int noload = 0) {
  const int QH = 32, KH = 8, bs = 16, G = QH / KH;
  const int S = pr.qlen.size();
  std::vector<int> cu(S + 1, 0);
  for (int s = 0; s < S; ++s) cu[s + 1] = cu[s] + pr.qlen[s];
  const int T = cu[S];
  int maxb = 0, nb = 0;
  for (int s = 0; s < S; ++s) {
    const int b = (pr.pos[s] + pr.qlen[s] + bs - 1) / bs;
    maxb = std::max(maxb, b);
    nb += b;
  }
  nb += 3;
  std::vector<int> perm(nb);
  for (int i = 0; i < nb; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), g);
  std::vector<int> bt((size_t)S * maxb, 0);
  int used = 0;
  for (int s = 0; s < S; ++s) {
    const int b = (pr.pos[s] + pr.qlen[s] + bs - 1) / bs;
    for (int i = 0; i < b; ++i) bt[(size_t)s * maxb + i] = perm[used++];
  }
  std::uniform_real_distribution<float> U(-1.f, 1.f);
  std::vector<__nv_bfloat16> hq((size_t)T * QH * D), hk((size_t)nb * bs * KH * D), hv(hk.size());
  for (auto& x : hq) x = __float2bfloat16(U(g));
  for (auto& x : hk) x = __float2bfloat16(U(g));
  for (auto& x : hv) x = __float2bfloat16(U(g));
  // tiles, longest first
  std::vector<std::pair<int, int>> tiles;
  for (int s = 0; s < S; ++s)
    for (int p = 0; p < pr.qlen[s] * G; p += 64 * NWG) tiles.push_back({s, p});
  std::stable_sort(tiles.begin(), tiles.end(), [&](auto a, auto b) {
    return pr.pos[a.first] + a.second / G > pr.pos[b.first] + b.second / G;
  });
  std::vector<int> ts, tr;
  for (auto& t : tiles) ts.push_back(t.first), tr.push_back(t.second);
  __nv_bfloat16 *dq, *dk, *dv, *dout;
  int *dbt, *dcu, *dpos, *dts, *dtr;
  CK(cudaMalloc(&dq, hq.size() * 2));
  CK(cudaMalloc(&dk, hk.size() * 2));
  CK(cudaMalloc(&dv, hv.size() * 2));
  CK(cudaMalloc(&dout, hq.size() * 2));
  CK(cudaMalloc(&dbt, bt.size() * 4 + 4));
  CK(cudaMalloc(&dcu, cu.size() * 4));
  CK(cudaMalloc(&dpos, S * 4));
  CK(cudaMalloc(&dts, ts.size() * 4));
  CK(cudaMalloc(&dtr, tr.size() * 4));
  CK(cudaMemcpy(dq, hq.data(), hq.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dk, hk.data(), hk.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dbt, bt.data(), bt.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dcu, cu.data(), cu.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dpos, pr.pos.data(), S * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dts, ts.data(), ts.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dtr, tr.data(), tr.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dout, 0xFF, hq.size() * 2));  // NaN poison
  const int smem_bytes = WS ? WsSmem<KEYS, WS>::kBytes : WgSmem<NWG, KEYS, OVERLAP ? 3 : 2>::kBytes;
  CUtensorMap tmk{}, tmv{};
  if (TMA) {
    const cuuint64_t dims[3] = {(cuuint64_t)D, (cuuint64_t)KH, (cuuint64_t)nb * bs};
    const cuuint64_t strides[2] = {(cuuint64_t)D * 2, (cuuint64_t)KH * D * 2};
    const cuuint32_t box[3] = {64, 1, (cuuint32_t)bs}, estr[3] = {1, 1, 1};
    for (int i = 0; i < 2; ++i) {
      CUresult r = cuTensorMapEncodeTiled(i ? &tmv : &tmk, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, i ? (void*)dv : (void*)dk, dims,
                                          strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
      if (r != CUDA_SUCCESS) {
        printf("cuTensorMapEncodeTiled: %d\n", (int)r);
        exit(1);
      }
    }
  }
  constexpr int KW = WS ? KEYS : 64;  // the WS kernel's keys (a WS = 0 run does not launch it)
  auto kern = wg_ws<KW, WS ? WS : 3, TMA, PP, QKA, REG>;
  const int threads = WS ? 384 : 128 * NWG;
  if (WS) CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  else CK(cudaFuncSetAttribute(wg_varlen<NWG, KEYS, OVERLAP>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  const float scale = 1.f / sqrtf((float)D);
  dim3 grid(tiles.size(), KH);
  auto launch = [&]() {
    if (WS)
      kern<<<grid, threads, smem_bytes>>>(dq, dk, dv, dbt, dcu, dpos, dts, dtr, dout, QH, KH, bs, maxb, scale, 1, noload, tmk, tmv);
    else
      wg_varlen<NWG, KEYS, OVERLAP><<<grid, threads, smem_bytes>>>(dq, dk, dv, dbt, dcu, dpos, dts, dtr, dout, QH, KH, bs, maxb, scale, 1, noload);
  };
  launch();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  double flops = 0;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < pr.qlen[s]; ++i) flops += 4.0 * D * QH * (pr.pos[s] + i + 1);
  double tflops = 0;
  if (reps > 0) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    std::vector<float> times;
    for (int r = 0; r < reps; ++r) {
      cudaEventRecord(a);
      for (int k = 0; k < 10; ++k) launch();
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      times.push_back(ms / 10);
    }
    std::sort(times.begin(), times.end());
    const double us = times[times.size() / 2] * 1000;
    tflops = flops / (us * 1e-6) / 1e12;
    int nreg = 0;
    cudaFuncAttributes fa;
    if (WS) cudaFuncGetAttributes(&fa, kern);
    else cudaFuncGetAttributes(&fa, wg_varlen<NWG, KEYS, OVERLAP>);
    nreg = fa.numRegs;
    printf("%-28s%s %s%s%s ws=%d nwg=%d keys=%3d ov=%d %9.2f us  %7.1f TFLOP/s  regs=%d local=%zu\n", name, noload ? " NOLOAD" : "", TMA ? (PP ? "tma+pp" : "tma") : (PP ? "pp" : "   "), QKA ? "+qka" : "", REG ? "+reg" : "", WS, NWG, KEYS, OVERLAP, us, tflops, nreg,
           fa.localSizeBytes);
  }
  if (check) {
    std::vector<int> tok_seq(T);
    for (int s = 0; s < S; ++s)
      for (int i = cu[s]; i < cu[s + 1]; ++i) tok_seq[i] = s;
    int* dtok;
    float* dref;
    CK(cudaMalloc(&dtok, T * 4));
    CK(cudaMalloc(&dref, hq.size() * 4));
    CK(cudaMemcpy(dtok, tok_seq.data(), T * 4, cudaMemcpyHostToDevice));
    int maxkv = 0;
    for (int s = 0; s < S; ++s) maxkv = std::max(maxkv, pr.pos[s] + pr.qlen[s]);
    CK(cudaFuncSetAttribute(ref_varlen, cudaFuncAttributeMaxDynamicSharedMemorySize, maxkv * 4));
    ref_varlen<<<dim3(T, QH), 128, maxkv * 4>>>(dq, dk, dv, dbt, dcu, dpos, dtok, dref, QH, KH, bs, maxb, scale, 1);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> ref(hq.size());
    std::vector<__nv_bfloat16> got(hq.size());
    CK(cudaMemcpy(ref.data(), dref, ref.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got.data(), dout, got.size() * 2, cudaMemcpyDeviceToHost));
    double maxerr = 0;
    size_t bad = 0, first = (size_t)-1;
    for (size_t i = 0; i < ref.size(); ++i) {
      const float x = __bfloat162float(got[i]);
      const double err = fabs((double)x - ref[i]);
      if (!(err <= 0.02 + 0.02 * fabs(ref[i]))) {
        if (first == (size_t)-1) first = i;
        ++bad;
      }
      if (err > maxerr || x != x) maxerr = x != x ? INFINITY : err;
    }
    printf("CHECK %-22s %s%s%s ws=%d nwg=%d keys=%d ov=%d T=%d: max err %.4g, bad %zu/%zu", name, TMA ? (PP ? "tma+pp" : "tma") : (PP ? "pp" : "   "), QKA ? "+qka" : "", REG ? "+reg" : "", WS, NWG, KEYS, OVERLAP, T, maxerr, bad, ref.size());
    if (bad) {
      const size_t t = first / (QH * D), h = first / D % QH, d = first % D;
      printf("  first bad token %zu head %zu dim %zu: got %g want %g", t, h, d, __bfloat162float(got[first]), ref[first]);
    }
    printf("\n");
    cudaFree(dtok);
    cudaFree(dref);
  }
  cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dout); cudaFree(dbt); cudaFree(dcu); cudaFree(dpos); cudaFree(dts); cudaFree(dtr);
  return tflops;
}

template <int NWG, int KEYS, bool OVERLAP, int WS = 0, bool TMA = false, bool PP = false, bool QKA = false, bool REG = false>
void suite(std::mt19937& g, bool check_only) {
  Problem ragged{{37, 1, 200, 64, 129}, {0, 300, 17, 1000, 5}};
  Problem chunk{{300}, {1700}};
  if (check_only) {
    run<NWG, KEYS, OVERLAP, WS, TMA, PP, QKA, REG>(ragged, true, 0, g, "ragged");
    run<NWG, KEYS, OVERLAP, WS, TMA, PP, QKA, REG>(chunk, true, 0, g, "chunk 1x300 kv2000");
    return;
  }
  run<NWG, KEYS, OVERLAP, WS, TMA, PP, QKA, REG>(Problem{{4096}, {0}}, false, 15, g, "1x4096");
  run<NWG, KEYS, OVERLAP, WS, TMA, PP, QKA, REG>(Problem{std::vector<int>(8, 2048), std::vector<int>(8, 0)}, false, 15, g, "8x2048");
  run<NWG, KEYS, OVERLAP, WS, TMA, PP, QKA, REG>(Problem{std::vector<int>(32, 512), std::vector<int>(32, 0)}, false, 15, g, "32x512");
  run<NWG, KEYS, OVERLAP, WS, TMA, PP, QKA, REG>(Problem{{16384}, {0}}, false, 15, g, "1x16384");
  run<NWG, KEYS, OVERLAP, WS, TMA, PP, QKA, REG>(Problem{std::vector<int>(4, 512), std::vector<int>(4, 7680)}, false, 15, g, "4x512 kv=8192");
  run<NWG, KEYS, OVERLAP, WS, TMA, PP, QKA, REG>(Problem{std::vector<int>(8, 2048), std::vector<int>(8, 0)}, false, 15, g, "8x2048", 1);
  run<NWG, KEYS, OVERLAP, WS, TMA, PP, QKA, REG>(Problem{{16384}, {0}}, false, 15, g, "1x16384", 1);
}

int main(int argc, char** argv) {
  std::mt19937 g(7);
  const bool check = argc > 1 && argv[1][0] == 'c';
  suite<2, 64, true, 4, true>(g, check);                       // TMA, P held across P·V
  suite<2, 64, true, 4, true, false, true>(g, check);          // TMA, QKA
  suite<2, 64, true, 4, true, false, true, true>(g, check);    // TMA, QKA, setmaxnreg
  suite<2, 128, true, 2, true, false, true, true>(g, check);   // 128 keys, TMA, QKA, setmaxnreg
  return 0;
}
