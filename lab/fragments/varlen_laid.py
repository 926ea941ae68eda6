# Checks the varlen kernel's x-split and shuffle tiles (kernels_src/varlen.cuh,
# LaidKV and LaidOffsets): every K and V element lands once, the ldmatrix reads
# give the mma.m16n8k16 B fragments of Q·Kᵀ and P·V, the 8 rows of each read
# sit in 8 bank groups, and each 32-byte sector of the cache lands in one
# 32-byte piece of shared memory (x-split: blocks of 16 or more; with blocks
# of 8 its V sector is elements d and d+1 of one 8-token group, which the
# slab layout puts 32 bytes apart).
THREADS = 128

def vt_at(xsplit, D, d, g):
    return (g >> 1) * 2 * D + 2 * d + ((g & 1) ^ ((d >> 2) & 1)) if xsplit else g * D + d

def loads(xsplit, D, KEYS, bs):
    """(global byte offset in the tile's pages, shared 16-byte chunk, tensor, token, d0) of every cp.async."""
    CH, U = D // 8, THREADS // KEYS
    J = CH // U
    out = []
    for t in range(THREADS):
        r, u = t % KEYS, t // KEYS
        page, o = r // bs, r % bs                    # token r of the tile (tiles start on a page edge or inside one page)
        for j in range(J):
            c = u + j * U                            # K piece
            k_glob = ('K', page, (c * bs + o) * 16)  # [D/8][bs][8] per (block, head)
            out.append((k_glob, c * KEYS + r, 'K', r, 8 * c))
            d = (r & 7) + 8 * (u + j * U)            # V element
            g = r >> 3
            go = (g * 8) % bs
            v_glob = ('V', page, (d * bs + go) * 2) if xsplit else ('V', page, ((go // 8) * D + d) * 16)
            out.append((v_glob, KEYS * D // 8 + vt_at(xsplit, D, d, g), 'V', g * 8, d))
    return out

def check(xsplit, D, KEYS, bs):
    L = loads(xsplit, D, KEYS, bs)
    chunks = [s for _, s, *_ in L]
    assert sorted(chunks) == list(range(2 * KEYS * D // 8)), "every chunk written once"
    smem = {}
    for _, s, tensor, t, d in L:
        for e in range(8):
            smem[s * 8 + e] = (tensor, t, d + e) if tensor == 'K' else (tensor, t + e, d)
    # Sector pairs: the two halves of each 32-byte global sector land in one
    # 32-byte piece.
    halves = {}
    for (tensor, page, off), s, *_ in L:
        halves.setdefault((tensor, page, off // 32), []).append(s)
    for key, ss in halves.items():
        if len(ss) == 2 and (not xsplit or bs >= 16 or key[0] == 'K'):
            assert ss[0] // 2 == ss[1] // 2, ("sector split", key, ss)
    # ldmatrix: lane 8j+i reads row i of matrix j.
    def frag(addr_of):
        regs = {}
        for lane in range(32):
            j, i = lane // 8, lane % 8
            a = addr_of(j, i)
            groups = {(addr_of(j, q) // 16) % 8 for q in range(8)}
            assert len(groups) == 8, "bank conflict"
            regs[lane] = [smem[a // 2 + e] for e in range(8)]
        return regs
    kbase = 0
    for np_ in range(KEYS // 16):
        for ks in range(D // 16):
            def kaddr(j, i):
                row, b = i + 8 * (j >> 1), j & 1
                return ((b * KEYS + row) * 16) + ks * 2 * KEYS * 16 + np_ * 256
            R = frag(kaddr)
            for lane in range(32):
                j, i = lane // 8, lane % 8
                want = [('K', 16 * np_ + 8 * (j >> 1) + i, 16 * ks + 8 * (j & 1) + e) for e in range(8)]
                assert R[lane] == want, ("K", lane, R[lane][:2], want[:2])
    vbase = KEYS * D * 2
    for kk in range(KEYS // 16):
        for dp in range(D // 16):
            def vaddr(j, i):
                row, b = i + 8 * (j >> 1), j & 1
                step = (16 if xsplit else 8) * 16
                return vbase + vt_at(xsplit, D, row, 2 * kk + b) * 16 + dp * 2 * step
            R = frag(vaddr)
            for lane in range(32):
                j, i = lane // 8, lane % 8
                want = [('V', 16 * kk + 8 * (j & 1) + e, 16 * dp + 8 * (j >> 1) + i) for e in range(8)]
                assert R[lane] == want, ("V", lane, R[lane][:2], want[:2])
    return True

def swizzle(CH, r, c):
    mask = 7 if CH >= 8 else CH - 1
    shift = 0 if CH >= 8 else (1 if CH == 4 else 2)
    return r * CH + (c ^ ((r >> shift) & mask))

def check_fp8(xsplit, D, KEYS, bs):
    """LaidFP8KV: the stage (loads) and widen give the flash 16-bit K tile and
    LaidKV's V tile, every element once; the cache's sectors land whole (x-split
    V: blocks of 16)."""
    CH, U = D // 16, THREADS // KEYS
    J = CH // U
    stage, halves = {}, {}
    for t in range(THREADS):
        r, u = t % KEYS, t // KEYS
        page, o = r // bs, (r & ~15) % bs
        for j in range(J):
            c = u + j * U
            s_k = c * KEYS + r
            stage[s_k] = [('K', r, 16 * c + e) for e in range(16)]
            k_glob = ('K', page, (c * bs + r % bs) * 16)
            d = (r & 15) + 16 * (u + j * U)
            q = r >> 4
            s_v = KEYS * D // 16 + q * D + d
            stage[s_v] = [('V', 16 * q + e, d) for e in range(16)]
            v_glob = ('V', page, d * bs + o) if xsplit else ('V', page, ((o // 16) * D + d) * 16)
            for g, sc in ((k_glob, s_k), (v_glob, s_v)):
                halves.setdefault((g[0], g[1], g[2] // 32), []).append(sc)
    assert sorted(stage) == list(range(2 * KEYS * D // 16)), "every stage piece written once"
    for key, ss in halves.items():
        if len(ss) == 2 and (key[0] == 'K' or not xsplit or bs == 16):
            assert ss[0] // 2 == ss[1] // 2, ("sector split", key, ss)
    wide = {}
    for i in range(KEYS * CH):        # K
        r, c = i % KEYS, i // KEYS
        x = stage[c * KEYS + r]
        wide[('K', swizzle(D // 8, r, 2 * c))] = x[:8]
        wide[('K', swizzle(D // 8, r, 2 * c + 1))] = x[8:]
    for i in range(KEYS * CH):        # V
        d, q = i % D, i // D
        x = stage[KEYS * D // 16 + q * D + d]
        wide[('V', vt_at(xsplit, D, d, 2 * q))] = x[:8]
        wide[('V', vt_at(xsplit, D, d, 2 * q + 1))] = x[8:]
    for r in range(KEYS):
        for c in range(D // 8):
            assert wide[('K', swizzle(D // 8, r, c))] == [('K', r, 8 * c + e) for e in range(8)]
    for d in range(D):
        for g in range(KEYS // 8):
            assert wide[('V', vt_at(xsplit, D, d, g))] == [('V', 8 * g + e, d) for e in range(8)]

for xsplit in (True, False):
    for D in (64, 128, 256):
        for KEYS in ((32,) if D == 256 else (32, 64)):
            for bs in (16, 32, 64, 128, 256):
                check_fp8(xsplit, D, KEYS, bs)
print("ok: fp8 x-split and shuffle varlen stages and widened tiles, blocks 16..256")

for xsplit in (True, False):
    for D in (64, 128, 256):
        for KEYS in ((32,) if D == 256 else (32, 64)):
            for bs in (8, 16, 32, 64, 128, 256):
                check(xsplit, D, KEYS, bs)
print("ok: x-split and shuffle varlen tiles, head dims 64/128/256, 32- and 64-key tiles, blocks 8..256")
