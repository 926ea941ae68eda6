# Checks the plan for decode over fp8 e4m3 caches in the x-split and shuffle
# layouts (docs/perf-notes.md, "fp8 caches in the x-split and shuffle
# layouts"): the narrow kernels' Oᵀ += Vᵀ·Pᵀ with Vᵀ read by plain ldmatrix
# from a transposed fp8 tile (element d's 16 tokens as 16 bytes), K read
# with token σ(ρ) as tile row ρ (so Sᵀ, and Pᵀ from movmatrix as today,
# come out in that order), and the mask reading token σ(ρ) for row ρ. It tracks which
# (token, element) each fragment slot holds and asserts that every mma k slot
# pairs V and P of one token, and that the 16 slots cover the 16 tokens.
TOK = 16

def sigma(k):  # mma k slot -> token (tile row ρ = k reads token σ(k))
    c, e = (k % 8) // 2, k % 2
    return 4 * c + e if k < 8 else 4 * c + 2 + e

def ldmatrix_rows(rows_bytes):
    """Plain ldmatrix .b16 of one 8x8 matrix whose row i is the 16 bytes
    rows_bytes[i]: lane (g, c) gets the 32-bit word of bytes 4c..4c+3 of row g."""
    return {lane: rows_bytes[lane // 4][4 * (lane % 4): 4 * (lane % 4) + 4] for lane in range(32)}

def check(D):
    # Vᵀ tile as stored: row d holds tokens 0..15 of element d (one byte each).
    vt = [[('V', t, d) for t in range(TOK)] for d in range(D)]
    for m in range(D // 16):
        w0 = ldmatrix_rows([vt[16 * m + i] for i in range(8)])       # rows g
        w1 = ldmatrix_rows([vt[16 * m + 8 + i] for i in range(8)])   # rows g + 8
        for lane in range(32):
            g, c = lane // 4, lane % 4
            # A fragment of m16n8k16 (rows d, k slots): a0 = A[g][2c, 2c+1],
            # a1 = A[g+8][2c, 2c+1], a2 = A[g][2c+8, 2c+9], a3 = A[g+8][...]
            a = {(g, 2 * c): w0[lane][0], (g, 2 * c + 1): w0[lane][1],
                 (g, 2 * c + 8): w0[lane][2], (g, 2 * c + 9): w0[lane][3],
                 (g + 8, 2 * c): w1[lane][0], (g + 8, 2 * c + 1): w1[lane][1],
                 (g + 8, 2 * c + 8): w1[lane][2], (g + 8, 2 * c + 9): w1[lane][3]}
            for (row, k), (_, t, d) in a.items():
                assert d == 16 * m + row, ("A row", m, lane, row, k)
                assert t == sigma(k), ("A slot token", m, lane, k, t, sigma(k))
    # Pᵀ (B of m16n8k16: k slots × 8 heads): Sᵀ = K·Qᵀ with K's A rows ρ
    # holding token σ(ρ); lane (g, c) holds Sᵀ[ρ = g][heads 2c, 2c+1]
    # and Sᵀ[ρ = g + 8][...]; movmatrix.trans of the two 8x8 halves gives
    # lane (g, c) b0 = (P[ρ = 2c][g], P[ρ = 2c+1][g]), b1 = rows 8+2c, 9+2c.
    for lane in range(32):
        g, c = lane // 4, lane % 4
        b = {2 * c: ('P', sigma(2 * c), g), 2 * c + 1: ('P', sigma(2 * c + 1), g),
             2 * c + 8: ('P', sigma(2 * c + 8), g), 2 * c + 9: ('P', sigma(2 * c + 9), g)}
        for k, (_, t, head) in b.items():
            assert t == sigma(k) and head == g
    assert sorted(sigma(k) for k in range(16)) == list(range(16)), "σ is a permutation of the tile's tokens"
    # K: the loader lands token t of piece c at slot c·16 + slot(t) (tokens
    # 8-15 swap pairs of pairs) and ldmatrix reads tile row ρ from slot
    # slot(σ(ρ)) (lanes l%8 + 8·((l/8)%2) of piece ks + l/16), so tile row ρ
    # holds token σ(ρ). Each 128-byte line of the cache (8 tokens of a piece)
    # lands in one 128-byte line of shared memory (cp.async writes one
    # wavefront per line it reads), and the 8 rows of each ldmatrix matrix
    # fall in 8 distinct 16-byte bank groups.
    slot = lambda t: t ^ ((t >> 2) & 2)
    assert sorted(slot(t) for t in range(16)) == list(range(16)), "slot is a permutation"
    for half in (0, 8):
        assert {slot(t) // 8 for t in range(half, half + 8)} == {half // 8}, ("line split", half)
    for ks in range(D // 16):
        for j in range(4):
            lanes = range(8 * j, 8 * j + 8)
            addrs = [(ks + (l >> 4)) * 16 + slot(sigma((l & 7) + ((l >> 3) & 1) * 8)) for l in lanes]
            assert len({a % 8 for a in addrs}) == 8, ("K bank groups", ks, j, addrs)
    return True

for D in (64, 128, 256):
    check(D)
print("ok: fp8 Vᵀ read plain and Pᵀ rows in σ order pair one token per k slot (head dims 64/128/256)")
