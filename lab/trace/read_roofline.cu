// read_roofline.cu: how fast can a kernel that only reads what a decode
// reads go? For the bench's decode shapes (32 q / 8 KV heads, head dim 128,
// f16, 16-token pages, random page tables over the bench's 8.6 GB pools), it
// times kernels that read exactly the decode's K and V bytes and do nothing
// else with them:
//   contig   the same number of bytes, one contiguous range each for K and V
//            (grid of 2 blocks per SM, 16 KiB of K + 16 KiB of V per unit);
//   head     the decode's pattern: one block per (sequence, KV head), four
//            warps each taking 16-token tiles w, w+4, …, a tile being 16 rows
//            of 256 bytes (that head's slice of each token) of K and of V;
//            also with a busy-wait per tile standing in for the math;
//   head_split  head issuing each tile's K as soon as its half of the
//            stage is free;
//   page     the same bytes read as whole token rows (all 8 heads of a token
//            are 2 KiB in a row): half pages of 16 KiB contiguous per cache,
//            blocks (sequence, part) with about two blocks per SM;
//            and with the decode's copy details one at a time (swizzled
//            destination, cp.async's src-size form, the ring after q);
//   rr_decode_f16_hd128   the decode kernel itself, on the same pool.
// They move the bytes as the decode does: cp.async 16-byte copies into a
// 3-stage shared-memory ring of 32 KiB stages (96 KiB per block, two blocks
// per SM), and fold one word per stage so nothing is optimized away. Prints
// µs per launch (median of 5 batches of 20) and the share of a 1 GiB
// device-to-device copy, measured in the same run; "probe" as the argument
// launches each copy-detail variant of head and the decode once, for a
// profiler.
//
// Build and run on the GPU machine from the repository root (see README.md):
//   nvcc -O3 -std=c++17 -arch=sm_90 -I kernels_src lab/trace/read_roofline.cu -o /tmp/rr && /tmp/rr
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "check.cuh"
#include "decode.cuh"  // the decode kernel, and common.cuh's cp.async helpers

using pkv::cp_async16;
using pkv::cp_async_commit;
using pkv::cp_async_wait;

// The decode kernel itself (f16, head dim 128), on the same pool and tables.
PKV_DECODE(rr_decode_f16_hd128, __half, __half, 128, false, false, pkv::kLayoutsFlash)

constexpr int kKVHeads = 8, kHeadBytes = 256, kPage = 16;
constexpr int kTokenBytes = kKVHeads * kHeadBytes;  // 2 KiB
constexpr int kPageBytes = kPage * kTokenBytes;     // 32 KiB
constexpr int kPoolPages = 262144;                  // the bench's pool: 8.6 GB per cache

// spin busy-waits about cycles clock cycles: a stand-in for the decode's
// math on a landed tile.
__device__ __forceinline__ void spin(int cycles) {
  if (cycles <= 0) return;
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// cp_async16_whole is cp.async without the src-size operand (always 16
// bytes), which head's copies use; common.cuh's cp_async16 (the decode's)
// has it.
__device__ __forceinline__ void cp_async16_whole(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

// Copy details of stream (head tries the decode's one at a time).
struct Copy {
  bool swizzle;  // chunk c of 16-chunk row r lands at chunk c ^ (r mod 8) of the row, as the decode's
  bool zfill;    // the src-size form of cp.async, as the decode's
};

// stream copies units 0 .. units-1 through a 3-stage cp.async ring at ring
// (as the decode kernel does), a group of THREADS threads (a warp or the
// block; tid is the thread's index in it) sharing each unit of CHUNKS
// 16-byte chunks; chunk c of unit u is at addr(u, c). work: a busy-wait per
// landed unit. It returns a fold of one word per landed stage, so nothing is
// optimized away.
template <int THREADS, int CHUNKS, typename Addr>
__device__ __forceinline__ uint32_t stream(int units, Addr addr, unsigned char* ring, int tid, int work = 0,
                                           Copy copy = {false, false}) {
  constexpr int kStage = CHUNKS * 16;
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(ring);
  auto issue = [&](int u) {
    const uint32_t st = base + (u % 3) * kStage;
#pragma unroll
    for (int c = tid; c < CHUNKS; c += THREADS) {
      const int row = c >> 4, chunk = c & 15;
      const uint32_t dst = st + (row * 16 + (copy.swizzle ? chunk ^ (row & 7) : chunk)) * 16;
      if (copy.zfill) {
        cp_async16(dst, addr(u, c), u < units ? 16 : 0);
      } else {
        cp_async16_whole(dst, addr(u, c));
      }
    }
  };
  auto sync = [] {
    if (THREADS == 32) {
      __syncwarp();
    } else {
      __syncthreads();
    }
  };
  uint32_t acc = 0;
  for (int j = 0; j < 2; ++j) {
    if (j < units) issue(j);
    cp_async_commit();
  }
  for (int i = 0; i < units; ++i) {
    if (i + 2 < units) issue(i + 2);
    cp_async_commit();
    cp_async_wait<2>();
    sync();
    acc ^= reinterpret_cast<const uint32_t*>(ring + (i % 3) * kStage)[tid];
    spin(work);
    sync();
  }
  cp_async_wait<0>();
  return acc;
}

// contig: block b streams 32 KiB units b, b + grid, … of the K+V range
// (16 KiB of K then the same 16 KiB of V).
__global__ void __launch_bounds__(128) contig(const char* k, const char* v, size_t bytes, uint32_t* sink) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int units = (int)((bytes / 16384 - blockIdx.x + gridDim.x - 1) / gridDim.x);
  const uint32_t acc = stream<128, 2048>(units, [&](int u, int c) -> const char* {
    const size_t off = ((size_t)u * gridDim.x + blockIdx.x) * 16384 + (c & 1023) * 16;
    return (c < 1024 ? k : v) + off;
  }, smem, threadIdx.x);
  if (acc == 0x12345678u) sink[blockIdx.x] = acc;
}

// head: the decode's pattern. Block (kvh, seq); warp w streams tiles w, w+4,
// … of the sequence through its own ring, which starts offset bytes into
// shared memory; a tile is 16 tokens (one page) × 256 bytes (head kvh's
// slice of each 2 KiB token row) of K, then of V: 16 rows of 16 chunks each.
__global__ void __launch_bounds__(128) head(const char* k, const char* v, const int* tables, int pages_per_seq,
                                            int kv, uint32_t* sink, int work, Copy copy, int offset) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int kvh = blockIdx.x, seq = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int* table = tables + (size_t)seq * pages_per_seq;
  const int tiles = kv / 16;
  const int mine = tiles > warp ? (tiles - warp + 3) / 4 : 0;
  const uint32_t acc = stream<32, 512>(mine, [&](int u, int c) -> const char* {
    const int tile = warp + 4 * u;
    const int row = (c & 255) >> 4;
    const size_t off = ((size_t)table[tile] * kPage + row) * kTokenBytes + kvh * kHeadBytes + (c & 15) * 16;
    return (c < 256 ? k : v) + off;
  }, smem + offset + warp * 3 * 8192, lane, work, copy);
  if (acc == 0x12345678u) sink[blockIdx.y * gridDim.x + blockIdx.x] = acc;
}

// head_split: head with each tile's K and V in separate copy groups, all
// three stages in flight at the start, and tile i+3's K issued as soon as
// tile i's K is used (its half of the stage is free), its V after the rest of
// the work, so that more is in flight while a tile's math runs. work is split
// in two: half after K lands (Q·Kᵀ), half after V lands (P·V).
__global__ void __launch_bounds__(128) head_split(const char* k, const char* v, const int* tables, int pages_per_seq,
                                                  int kv, uint32_t* sink, int work) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int kvh = blockIdx.x, seq = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int* table = tables + (size_t)seq * pages_per_seq;
  const int tiles = kv / 16;
  const int mine = tiles > warp ? (tiles - warp + 3) / 4 : 0;
  unsigned char* ring = smem + warp * 3 * 8192;
  const uint32_t base = (uint32_t)__cvta_generic_to_shared(ring);
  // issue copies half (0: K, 1: V) of tile u, or commits an empty group.
  auto issue = [&](int u, int half) {
    if (u < mine) {
      const size_t page0 = (size_t)table[warp + 4 * u] * kPage;
      const uint32_t st = base + (u % 3) * 8192 + half * 4096;
      const char* cache = half == 0 ? k : v;
#pragma unroll
      for (int c = lane; c < 256; c += 32) {
        const size_t off = (page0 + (c >> 4)) * kTokenBytes + kvh * kHeadBytes + (c & 15) * 16;
        cp_async16_whole(st + c * 16, cache + off);
      }
    }
    cp_async_commit();
  };
  uint32_t acc = 0;
  for (int j = 0; j < 3; ++j) {
    issue(j, 0);
    issue(j, 1);
  }
  for (int i = 0; i < mine; ++i) {
    // Newer than K_i: V_i and K, V of i+1 and i+2.
    cp_async_wait<5>();
    __syncwarp();
    acc ^= reinterpret_cast<const uint32_t*>(ring + (i % 3) * 8192)[lane];
    spin(work / 2);
    __syncwarp();
    issue(i + 3, 0);  // into K_i's half of the stage
    // Newer than V_i: K, V of i+1 and i+2, and K_{i+3}.
    cp_async_wait<5>();
    __syncwarp();
    acc ^= reinterpret_cast<const uint32_t*>(ring + (i % 3) * 8192 + 4096)[lane];
    spin(work - work / 2);
    __syncwarp();
    issue(i + 3, 1);
  }
  cp_async_wait<0>();
  if (acc == 0x12345678u) sink[blockIdx.y * gridDim.x + blockIdx.x] = acc;
}

// page: the same bytes read as whole token rows. Block (seq, part) streams
// its part of the sequence's pages in half pages: 8 tokens × 2 KiB of K,
// then of V (16 KiB each, contiguous).
__global__ void __launch_bounds__(128) page(const char* k, const char* v, const int* tables, int pages_per_seq,
                                            uint32_t* sink) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int seq = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  const int* table = tables + (size_t)seq * pages_per_seq;
  const int per = (pages_per_seq + parts - 1) / parts;
  const int p0 = part * per, p1 = min(pages_per_seq, p0 + per);
  const int units = p1 > p0 ? 2 * (p1 - p0) : 0;
  const uint32_t acc = stream<128, 2048>(units, [&](int u, int c) -> const char* {
    const size_t off = (size_t)table[p0 + u / 2] * kPageBytes + (u & 1) * 16384 + (c & 1023) * 16;
    return (c < 1024 ? k : v) + off;
  }, smem, threadIdx.x);
  if (acc == 0x12345678u) sink[blockIdx.x * gridDim.y + blockIdx.y] = acc;
}

template <typename F>
double time_us(F launch) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) launch();
  std::vector<double> batches;
  for (int b = 0; b < 5; ++b) {
    CHECK(cudaEventRecord(e0));
    for (int i = 0; i < 20; ++i) launch();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float ms;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    batches.push_back(ms * 1000.0 / 20);
  }
  CHECK(cudaGetLastError());
  std::sort(batches.begin(), batches.end());
  return batches[2];
}

int main(int argc, char** argv) {
  const bool probe = argc > 1;  // one launch of each copy-detail variant and the decode (for a profiler), then exit
  int sms;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // Three 32 KiB stages per block, as the decode's ring: two blocks per SM.
  const int kSmem = 3 * 32768;
  CHECK(cudaFuncSetAttribute(contig, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(head, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem + 4096));
  CHECK(cudaFuncSetAttribute(head_split, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  CHECK(cudaFuncSetAttribute(page, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  const size_t pool = (size_t)kPoolPages * kPageBytes;
  char *k, *v;
  CHECK(cudaMalloc(&k, pool));
  CHECK(cudaMalloc(&v, pool));
  CHECK(cudaMemset(k, 1, pool));
  CHECK(cudaMemset(v, 2, pool));
  uint32_t* sink;
  CHECK(cudaMalloc(&sink, 1 << 20));
  int* tables;
  CHECK(cudaMalloc(&tables, (size_t)kPoolPages * sizeof(int)));

  // Copy bandwidth: 1 GiB device to device, best of 5, read + written bytes.
  double copy = 0;
  {
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 6; ++i) {
      CHECK(cudaEventRecord(e0));
      CHECK(cudaMemcpy(v, k, size_t(1) << 30, cudaMemcpyDeviceToDevice));
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float ms;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (i > 0) copy = std::max(copy, 2.0 * (1 << 30) / (ms * 1e-3) / 1e9);
    }
  }
  printf("copy %.0f GB/s; %d SMs\n", copy, sms);
  printf("%-18s %10s %10s %10s %10s   head with work per tile (cycles): 500 1000 2000 | split K/V issue: 0 1000 2000\n",
         "shape", "MB K+V", "contig", "head", "page");

  std::mt19937_64 g(1);
  std::vector<int> perm(kPoolPages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), g);
  CHECK(cudaMemcpy(tables, perm.data(), perm.size() * sizeof(int), cudaMemcpyHostToDevice));

  {
    // The decode's copy details on seqs=32, kv=2048: plain, swizzled
    // destination, src-size form, both.
    const int seqs = 32, kv = 2048, pps = kv / kPage;
    const dim3 grid(kKVHeads, seqs);
    // head with the decode's copy details: plain, swizzled destination,
    // src-size form, both, both with the ring 4 KiB in (after q).
    auto t = [&](Copy copy, int offset) {
      auto launch = [&] {
        head<<<grid, 128, kSmem + offset>>>(k, v, tables, pps, kv, sink, 0, copy, offset);
      };
      if (probe) {
        launch();
        CHECK(cudaDeviceSynchronize());
        return 0.0;
      }
      return time_us(launch);
    };
    const double a = t({false, false}, 0), b = t({true, false}, 0), c = t({false, true}, 0), d = t({true, true}, 0),
                 e = t({true, true}, 4096);
    printf("seqs=32 kv=2048 copy details: plain %.1fµs, swizzled %.1fµs, src-size %.1fµs, both %.1fµs, both after 4 KiB %.1fµs\n",
           a, b, c, d, e);
    // The decode kernel on this pool: q of zeros, every length kv.
    const int dsmem = 4096 + 3 * 32768;
    CHECK(cudaFuncSetAttribute(rr_decode_f16_hd128, cudaFuncAttributeMaxDynamicSharedMemorySize, dsmem));
    __half *q, *out;
    int* lens;
    CHECK(cudaMalloc(&q, (size_t)seqs * 32 * 128 * 2));
    CHECK(cudaMemset(q, 0, (size_t)seqs * 32 * 128 * 2));
    CHECK(cudaMalloc(&out, (size_t)seqs * 32 * 128 * 2));
    CHECK(cudaMalloc(&lens, seqs * sizeof(int)));
    std::vector<int> hl(seqs, kv);
    CHECK(cudaMemcpy(lens, hl.data(), seqs * sizeof(int), cudaMemcpyHostToDevice));
    auto dec = [&] {
      rr_decode_f16_hd128<<<grid, 128, dsmem>>>(out, nullptr, nullptr, nullptr, nullptr, nullptr, q, (const __half*)k,
                                                (const __half*)v, tables, lens, nullptr, 32 * 128, 32, pps, 4,
                                                kPoolPages, 0.088f, 1.0f, 1.0f, /*work=*/nullptr,
                                                pkv::kLayoutFlash, /*kv_bias=*/0);
    };
    if (probe) {
      dec();
      CHECK(cudaDeviceSynchronize());
    } else {
      printf("decode kernel on this pool: %.1fµs\n", time_us(dec));
    }
    if (probe) return 0;
  }
  const int shapes[][2] = {{8, 8192}, {32, 2048}, {128, 512}, {32, 8192}, {128, 2048}, {32, 32768}};
  for (const auto& s : shapes) {
    const int seqs = s[0], kv = s[1], pps = kv / kPage;
    const size_t bytes = (size_t)seqs * kv * kTokenBytes;  // per cache
    auto pct = [&](double us) { return 100.0 * 2 * bytes / (us * 1e-6) / 1e9 / copy; };
    const double c = time_us([&] { contig<<<2 * sms, 128, kSmem>>>(k, v, bytes, sink); });
    auto h_at = [&](int work) {
      return time_us([&] {
        head<<<dim3(kKVHeads, seqs), 128, kSmem>>>(k, v, tables, pps, kv, sink, work, Copy{false, false}, 0);
      });
    };
    auto s_at = [&](int work) {
      return time_us([&] { head_split<<<dim3(kKVHeads, seqs), 128, kSmem>>>(k, v, tables, pps, kv, sink, work); });
    };
    const double h = h_at(0);
    const int parts = std::max(1, 2 * sms / seqs);
    const double pg = time_us([&] { page<<<dim3(seqs, parts), 128, kSmem>>>(k, v, tables, pps, sink); });
    char name[32];
    snprintf(name, sizeof name, "seqs=%d kv=%d", seqs, kv);
    printf("%-18s %10.0f %6.1fµs %3.0f%% %6.1fµs %3.0f%% %6.1fµs %3.0f%%   %6.1f %6.1f %6.1f | %6.1f %6.1f %6.1f\n", name,
           2.0 * bytes / 1e6, c, pct(c), h, pct(h), pg, pct(pg), h_at(500), h_at(1000), h_at(2000), s_at(0), s_at(1000),
           s_at(2000));
  }
  return 0;
}
