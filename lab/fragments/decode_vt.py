import random
# Emulates ldmatrix (x4, b16, plain and .trans) over a shared-memory image and
# checks the decode kernel's K and V operand fragments, flash tiles (control) and
# the x-split and shuffle tiles, against the mma.m16n8k16 layouts.
def swizzle(CH, r, c):
    mask = 7 if CH >= 8 else CH - 1
    shift = 0 if CH >= 8 else (1 if CH == 4 else 2)
    return r * CH + (c ^ ((r >> shift) & mask))
def vt_chunk(d, h): return 2 * d + (h ^ ((d >> 2) & 1))
def vt_at(xs, D, d, h): return vt_chunk(d, h) if xs else h * D + d

def ldmatrix(smem, addrs, trans):
    # addrs[lane] = byte address of row (lane%8) of matrix lane//8
    regs = [[None]*4 for _ in range(32)]
    for j in range(4):
        rows = [[smem[(addrs[8*j+r] + 2*e)] for e in range(8)] for r in range(8)]
        for lane in range(32):
            g, c = lane // 4, lane % 4
            if not trans: regs[lane][j] = (rows[g][2*c], rows[g][2*c+1])
            else: regs[lane][j] = (rows[2*c][g], rows[2*c+1][g])
    return regs

def check(D):
  for xs in (True, False):
    CH = D // 8
    V = {(t, d): ('V', t, d) for t in range(16) for d in range(D)}
    K = {(t, d): ('K', t, d) for t in range(16) for d in range(D)}
    flash, vt, kf, kp = {}, {}, {}, {}
    for (t, d), v in V.items():
        flash[swizzle(CH, t, d // 8) * 16 + (d % 8) * 2] = v
        vt[vt_at(xs, D, d, t // 8) * 16 + (t % 8) * 2] = v
        kf[swizzle(CH, t, d // 8) * 16 + (d % 8) * 2] = K[(t, d)]
        kp[((d // 8) * 16 + t) * 16 + (d % 8) * 2] = K[(t, d)]
    def banks(a_t, what):
        for j in range(4):
            bs = {(a_t[8*j+r] // 16) % 8 for r in range(8)}
            assert len(bs) == 8, (what, D, xs, j)
    # K, piece-major against the flash tile: narrow A (x4_row, chunk 2ks + l/16),
    # wide B (k_row, chunk 2ks + (l/8)%2)
    x4_row = [(l & 7) + ((l >> 3) & 1) * 8 for l in range(32)]
    k_row = [(l & 7) + (l >> 4) * 8 for l in range(32)]
    for ks in range(D // 16):
        for rows, cb in ((x4_row, [l >> 4 for l in range(32)]), (k_row, [(l >> 3) & 1 for l in range(32)])):
            af = [swizzle(CH, rows[l], 2 * ks + cb[l]) * 16 for l in range(32)]
            ap = [((2 * ks + cb[l]) * 16 + rows[l]) * 16 for l in range(32)]
            assert ldmatrix(kf, af, False) == ldmatrix(kp, ap, False), ('K', D, ks)
            banks(ap, 'K conflict')
    # wide: B = V (k = token, n = d)
    for n in range(0, D // 8, 2):
        a_f = [swizzle(CH, x4_row[l], n + (l >> 4)) * 16 for l in range(32)]
        vt_row = [(l & 7) + (l >> 4) * 8 for l in range(32)]
        step = 16 * 16 if xs else 8 * 16
        a_t = [vt_at(xs, D, vt_row[l], (l >> 3) & 1) * 16 + n * step for l in range(32)]
        rf = ldmatrix(flash, a_f, True); rt = ldmatrix(vt, a_t, False)
        for l in range(32):
            g, c = l // 4, l % 4
            want = [(V[(2*c, 8*n+g)], V[(2*c+1, 8*n+g)]), (V[(8+2*c, 8*n+g)], V[(9+2*c, 8*n+g)]),
                    (V[(2*c, 8*n+8+g)], V[(2*c+1, 8*n+8+g)]), (V[(8+2*c, 8*n+8+g)], V[(9+2*c, 8*n+8+g)])]
            assert rf[l] == want, ('wide flash', D, n, l)
            assert rt[l] == want, ('wide vt', D, xs, n, l, rt[l], want)
        banks(a_t, 'conflict wide')
    # narrow: A = Vᵀ (rows d, cols tokens), m-tile m = d 16m..16m+15
    for m in range(D // 16):
        v_row = [(l & 7) + (l >> 4) * 8 for l in range(32)]
        a_f = [swizzle(CH, v_row[l], 2 * m + ((l >> 3) & 1)) * 16 for l in range(32)]
        step = 32 * 16 if xs else 16 * 16
        a_t = [vt_at(xs, D, x4_row[l], l >> 4) * 16 + m * step for l in range(32)]
        rf = ldmatrix(flash, a_f, True); rt = ldmatrix(vt, a_t, False)
        for l in range(32):
            g, c = l // 4, l % 4
            want = [(V[(2*c, 16*m+g)], V[(2*c+1, 16*m+g)]), (V[(2*c, 16*m+g+8)], V[(2*c+1, 16*m+g+8)]),
                    (V[(8+2*c, 16*m+g)], V[(9+2*c, 16*m+g)]), (V[(8+2*c, 16*m+g+8)], V[(9+2*c, 16*m+g+8)])]
            assert rf[l] == want, ('narrow flash', D, m, l)
            assert rt[l] == want, ('narrow vt', D, xs, m, l, rt[l], want)
        banks(a_t, 'conflict narrow')
    # the loader (LAID): lane l keeps token l%16 (K pieces l/16 + 2j, at
    # chunk l + 32j of the piece-major tile) and V chunk (d0 = l/2, h = l%2),
    # d = d0 + 16j, at vt_at(d0, h) + j·(32 x-split, 16 shuffle) chunks;
    # every K (token, piece) and V (d, h) once, and the two lanes of each
    # 32-byte sector of the cache (lanes 2i, 2i+1 for K and x-split V; 2i+h,
    # 2i+2+h for shuffle V) land side by side.
    ISSUES = CH // 2
    kseen, vseen = set(), set()
    for j in range(ISSUES):
        kat, vat = [], []
        for lane in range(32):
            r, c = lane & 15, (lane >> 4) + 2 * j
            kseen.add((r, c)); kat.append(lane + 32 * j); assert kat[-1] == c * 16 + r
            d0, h = lane >> 1, lane & 1
            vseen.add((d0 + 16 * j, h))
            a = vt_at(xs, D, d0, h) + (32 if xs else 16) * j
            assert a == vt_at(xs, D, d0 + 16 * j, h), ('vt step', D)
            vat.append(a)
        for i in range(16):
            assert abs(kat[2*i] - kat[2*i+1]) == 1 and min(kat[2*i], kat[2*i+1]) % 2 == 0
            pair = (2*i, 2*i+1) if xs else (4*(i//2) + (i % 2), 4*(i//2) + (i % 2) + 2)
            a, b = vat[pair[0]], vat[pair[1]]
            assert abs(a - b) == 1 and min(a, b) % 2 == 0, ('V sector', D, xs, j, i, a, b)
    assert kseen == {(r, c) for r in range(16) for c in range(CH)}, ('K loader', D)
    assert vseen == {(d, h) for d in range(D) for h in range(2)}, ('V loader', D)
  print('ok', D)
for D in (64, 128, 256): check(D)

# The loader's global offsets (issue, LAID) against the layouts' definition
# (internal/ref CacheIndex): K chunks of x-split and shuffle, V chunks of 8
# tokens of one element.
def cache_index(l, value, slot, h, d, H, D, bs, x):
    b, o = slot // bs, slot % bs
    if l == 0: return (slot*H + h)*D + d
    if not value: return (((b*H+h)*(D//x) + d//x)*bs + o)*x + d % x
    if l == 1: return ((b*H+h)*D + d)*bs + o
    return (((b*H+h)*(bs//x) + o//x)*D + d)*x + o % x
for _ in range(20000):
    D = random.choice([64,128,256]); H = random.randint(1,8); lg = random.randint(3,8); bs = 1 << lg
    blk = random.randint(0,1000); kvh = random.randrange(H); CH = D//8
    o = random.randrange(bs); lane = random.randrange(32); j = random.randrange(CH // 2)
    chunk = (lane >> 4) + 2 * j
    koff = ((((blk*H + kvh)*CH + (lane >> 4)) << lg) | o) * 8 + j * (16 << lg)
    slot = blk*bs + o
    for e in range(8):
        assert koff + e == cache_index(1, False, slot, kvh, chunk*8 + e, H, D, bs, 8)
        assert koff + e == cache_index(2, False, slot, kvh, chunk*8 + e, H, D, bs, 8)
    o8 = (o // 8) * 8; d0 = lane >> 1; d = d0 + 16 * j; bh = blk*H + kvh
    vx = ((bh*D + d0) << lg) + o8 + j * (16 << lg)
    vs = ((bh << (lg - 3)) + (o8 >> 3))*(D*8) + d0*8 + j * 128
    for e in range(8):
        s2 = blk*bs + o8 + e
        assert vx + e == cache_index(1, True, s2, kvh, d, H, D, bs, 8)
        assert vs + e == cache_index(2, True, s2, kvh, d, H, D, bs, 8)
print("ok")
