"""decode_variants.py writes copies of kernels_src whose decode kernel differs
in one detail, for the experiments of docs/perf-notes.md (Decode, entry 15).
They are never part of the build: compile a harness against one with -I.

    python3 lab/decode_variants.py kernels_src /tmp/exp [name ...]
    nvcc -O3 -std=c++17 -arch=sm_90 -I /tmp/exp/nomath lab/trace/read_roofline.cu -o /tmp/rr

Variants (all by default):
    nomath  the main loop copies tiles but skips the math (output is wrong)
    kfirst  each tile's K rows are issued before its V rows
    idload  each row's block id is read from the table at issue time
    noq     q is not loaded (output is wrong)
    nozfill the K/V copies without cp.async's src-size operand
    qlast   q after the ring, so the ring starts at the base of shared memory
    idcg    the block ids read with ld.global.cg instead of the read-only path
    headissue  the K/V copies written as read_roofline.cu's head kernel
            writes them (valid only for f16, head dim 128, 8 KV heads,
            16-token pages and whole tiles: the harnesses' shapes)
    l2pf    each warp also asks L2 (prefetch.global.L2) for the tile
            PKV_PF_DEPTH issues after the one it copies (default 3), one
            prefetch per PKV_PF_STEP bytes of a row (default 128), so more
            bytes are on their way than the ring holds
    (qreg, qreg3, qchain: q's fragments in registers, also at most 168
    registers, and two Q·K chains; qreg is the kernel since session 5, and
    all three are in git history, commit "exp: decode_variants l2pf/qreg...")
"""
import shutil
import sys

ISSUE_K = ('cp_async16(kdst + at, reinterpret_cast<const unsigned char*>(k_head + off) + chunk * 16, ok ? 16 : 0);')
ISSUE_V = ('cp_async16(vdst + at, reinterpret_cast<const unsigned char*>(v_head + off) + chunk * 16, ok ? 16 : 0);')


def cut(s, start, end, insert=''):
    a, b = s.index(start), s.index(end)
    return s[:a] + insert + s[b:]


def nomath(s):
    return cut(s, '    // S = Q·Kᵀ: n-tile 0 is tokens 0-7 of the tile, n-tile 1 tokens 8-15.',
               '    __syncwarp();  // this stage is refilled next iteration',
               '    acc[0][0] += reinterpret_cast<const float*>(ring + ((i % stages) * kDecodeWarps + warp)'
               ' * 2 * Smem::kTileBytes)[lane];\n')


def kfirst(s):
    loop_head = '''#pragma unroll
    for (int j = 0; j < ISSUES; ++j) {
      const int r = lane / CH + ROWS_PER_ISSUE * j;
      const int t = base + r;
      const int blk = __shfl_sync(0xffffffffu, ids, r);
      const bool ok = t < end;
      const int64_t off = ok ? (((int64_t)blk << block_size_log2) | (t & bs_mask)) * row_stride : 0;
      const int at = swizzle<CH>(r, chunk) * 16;
'''
    old = loop_head + '      ' + ISSUE_K + '\n      ' + ISSUE_V + '\n    }\n'
    return replace(s, old, loop_head + '      ' + ISSUE_K + '\n    }\n' + loop_head + '      ' + ISSUE_V + '\n    }\n')


def idload(s):
    return replace(s, 'const int blk = __shfl_sync(0xffffffffu, ids, r);',
                   'const int blk = __ldg(table + (t >> block_size_log2));')


def noq(s):
    return cut(s, '  // q as <q>, rows ≥ G zero, in the k order of the cache type, swizzled:',
               '  const int cap = max_blocks_per_seq << block_size_log2;')


def nozfill(s):
    plain = 'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"({dst} + at), "l"(reinterpret_cast<const unsigned char*>({head} + off) + chunk * 16));'
    s = replace(s, ISSUE_K, plain.format(dst='kdst', head='k_head'))
    return replace(s, ISSUE_V, plain.format(dst='vdst', head='v_head'))


def qlast(s):
    old = '''  int stages;
  {
    uint32_t have;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
    stages = min(((int)have - Smem::kQBytes) / Smem::kStageBytes, Smem::kMaxStages);
    if (stages < 2) __trap();  // the launch must pass room for q and two stages
  }
  T* q_s = reinterpret_cast<T*>(smem);
  unsigned char* ring = smem + Smem::kQBytes;'''
    new = '''  int stages;
  uint32_t have;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(have));
  stages = min(((int)have - Smem::kQBytes) / Smem::kStageBytes, Smem::kMaxStages);
  if (stages < 2) __trap();  // the launch must pass room for q and two stages
  T* q_s = reinterpret_cast<T*>(smem + stages * Smem::kStageBytes);
  unsigned char* ring = smem;'''
    return replace(s, old, new)


def idcg(s):
    return replace(s, 'return page < max_blocks_per_seq ? __ldg(table + page) : 0;',
                   'return page < max_blocks_per_seq ? __ldcg(table + page) : 0;')


def headissue(s):
    a = s.index('  auto issue = [&](int i, int ids, int st) {')
    b = s.index('  // Running state of rows r0 = lane/4')
    body = '''  auto issue = [&](int i, int ids, int st) {
    const int base = start + (warp + kDecodeWarps * i) * kTileTokens;
    const uint32_t kdst = smem_addr(ring + (st * kDecodeWarps + warp) * 2 * Smem::kTileBytes);
    const size_t page0 = (size_t)__ldg(table + (base >> block_size_log2)) << block_size_log2;
    const char* kc = reinterpret_cast<const char*>(k_cache);
    const char* vc = reinterpret_cast<const char*>(v_cache);
#pragma unroll
    for (int c = lane; c < 512; c += 32) {
      const int row = (c & 255) >> 4, ch = c & 15;
      const size_t off = (page0 + row) * 2048 + kvh * 256 + ch * 16;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(kdst + (c & 256) * 16 + (row * 16 + (ch ^ (row & 7))) * 16),
                   "l"((c < 256 ? kc : vc) + off));
    }
  };

'''
    return s[:a] + body + s[b:]


def l2pf(s):
    head = '''#ifndef PKV_PF_DEPTH
#define PKV_PF_DEPTH 3
#endif
#ifndef PKV_PF_STEP
#define PKV_PF_STEP 128
#endif
'''
    s = replace(s, '#pragma once\n', '#pragma once\n' + head)
    lam = '''  auto prefetch_l2 = [&](int i, int ids) {
    const int t = start + (warp + kDecodeWarps * i) * kTileTokens + (lane & 15);
    if (i >= mine || t >= end) return;
    const int64_t off = (((int64_t)ids << block_size_log2) | (t & bs_mask)) * row_stride;
    const unsigned char* kp = reinterpret_cast<const unsigned char*>(k_head + off);
    const unsigned char* vp = reinterpret_cast<const unsigned char*>(v_head + off);
    for (int b = (lane >> 4) * PKV_PF_STEP; b < Smem::kRowBytes; b += 2 * PKV_PF_STEP) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(kp + b));
      asm volatile("prefetch.global.L2 [%0];" ::"l"(vp + b));
    }
  };

'''
    s = replace(s, '  // Running state of rows r0 = lane/4', lam + '  // Running state of rows r0 = lane/4')
    first = '''  int pf_id;
  {
    int ids[PKV_PF_DEPTH];
#pragma unroll
    for (int k = 1; k <= PKV_PF_DEPTH; ++k) ids[k - 1] = raw_id(start, stages - 1 + k);
#pragma unroll
    for (int k = 1; k < PKV_PF_DEPTH; ++k) prefetch_l2(stages - 1 + k, checked_id(ids[k - 1], stages - 1 + k));
    pf_id = ids[PKV_PF_DEPTH - 1];
  }
  __syncthreads();  // q_s is written
'''
    s = replace(s, '  __syncthreads();  // q_s is written\n', first)
    old = '''      if (j < mine) issue(j, checked_id(id_cur, j), j % stages);
      cp_async_commit();
'''
    new = old + '''      prefetch_l2(j + PKV_PF_DEPTH, checked_id(pf_id, j + PKV_PF_DEPTH));
      pf_id = raw_id(start, j + PKV_PF_DEPTH + 1);
'''
    return replace(s, old, new)


def replace(s, old, new):
    if old not in s:
        sys.exit('decode_variants: decode.cuh no longer has the text this variant changes; update the script')
    return s.replace(old, new)


VARIANTS = {f.__name__: f for f in (nomath, kfirst, idload, noq, nozfill, qlast, idcg, headissue, l2pf)}


def main():
    src, out, names = sys.argv[1], sys.argv[2], sys.argv[3:] or list(VARIANTS)
    for name in names:
        dst = f'{out}/{name}'
        shutil.copytree(src, dst, dirs_exist_ok=True)
        path = dst + '/decode.cuh'
        with open(path) as f:
            s = f.read()
        with open(path, 'w') as f:
            f.write(VARIANTS[name](s))


if __name__ == '__main__':
    main()
