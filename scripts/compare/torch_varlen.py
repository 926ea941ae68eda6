"""Dense varlen attention in PyTorch (FlashAttention-2 varlen and cuDNN SDPA)
on the shapes of `pagedkv bench varlen`, for side-by-side ratios: run it in
the same device call as `pagedkv bench varlen`.

Shapes (32 query heads, 8 KV heads, head dim 128 unless a shape names one, causal, bf16 and f16; the
names are the Go bench's, so rows can be joined on (dtype, shape)):
prefill 1x4096, 8x2048, 32x512, 1x16384; chunk 4x512 kv=8192 (pos_offset
7680); small-query 8x16 kv=8192; spec-verify 8x5 kv=3584; chunk 1x16 over
512, 1024 and 2048; chunk 1x300 kv=2000; mixed 64x1 kv=2048 + 2x512
kv=4096; decodes 64x1 kv=2048; the head dims 80-192 (the names say which).

Causal is bottom-right aligned everywhere, as in pagedkv: query i of a
sequence with q_len L over kv_len K attends keys 0 .. K-L+i.

- FA2 varlen: torch.ops.aten._flash_attention_forward with cu_seqlens (or
  torch.nn.attention.varlen.varlen_attn, which wraps it), one call per batch,
  dense K/V [total_k, 8, 128] (not paged: FA2's paged path needs pages of
  256 tokens, and ours are 16). FlashAttention >= 2.1 aligns its causal
  mask to the bottom-right corner when seqlen_q != seqlen_k: PyTorch's
  sdp_utils.cpp (check_flash_causal_non_square_seqlens) says so ("it is now
  aligned to lower_right", FA2 commit 9e5e8bc91e) and therefore keeps
  SDPA's top-left is_causal off flash for non-square shapes, and
  torch/nn/attention/bias.py calls the flash op with is_causal=True to get
  causal_lower_right. The raw op is the bottom-right mask we want.
- cuDNN SDPA: F.scaled_dot_product_attention under
  sdpa_kernel(SDPBackend.CUDNN_ATTENTION), dense [B, H, S, D], equal
  lengths per call. q_len == kv_len: is_causal=True (top-left, the same
  mask when square). q_len == 1: no mask (bottom-right causal attends every
  key). Otherwise causal_lower_right(q_len, kv_len): SDPA has no
  bottom-right flag, and with flash and efficient attention off,
  CausalBias materializes its mask on every call, so it is materialized
  once here, as an additive [q_len, kv_len] mask in the query dtype, and
  cuDNN runs it as a bias (the line says so, or that cuDNN refused it).
  GQA through enable_gqa=True, else K/V expanded to 32 heads (the line says
  which). The mixed batch is two SDPA calls (decode rows, then the chunks),
  timed together.

Timing is the Go bench's (cmd/pagedkv bench.go, measure): CUDA events, 3
warm-up calls, one timed call to pick k so a batch lasts about 300 us (1 to
64 calls), then --reps batches of k calls; the median us per call. Dense K/V
rotate through enough sets that the K/V read per call passes 3x the L2
(at most 16 sets). FLOPs are the Go bench's exact causal count:
4 * head_dim * q_heads * sum over sequences of (L*P + L*(L+1)/2), P =
pos_offset. Small-query and mixed rows also give % of the device-to-device
copy bandwidth measured here, bytes = K+V (each sequence's KV once per KV
head) + q + out.

With --json PATH the rows are also written to PATH, each as {"peer": "fa2"
or "cudnn", "op": "varlen", "dtype", "shape", "plan", "us", "tflops"} (and
"gbps", "pct_copy" on memory-bound rows) under "results", beside the
device, torch version, date and copy bandwidth; `pagedkv chart` joins them
with the Go bench's rows on (op, dtype, shape).

usage: python3 scripts/compare/torch_varlen.py [--json PATH] [--reps N]
           [--dtypes bf16,f16] [--backends fa2,cudnn]
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

Q_HEADS, KV_HEADS, HEAD_DIM = 32, 8, 128

# (shape, runs of (seqs, q_len, kv_len), memory-bound) as in
# cmd/pagedkv/bench_varlen.go varlenCases.
SHAPES = [
    ("prefill 1x4096", [(1, 4096, 4096)], False),
    ("prefill 8x2048", [(8, 2048, 2048)], False),
    ("prefill 32x512", [(32, 512, 512)], False),
    ("prefill 1x16384", [(1, 16384, 16384)], False),
    ("chunk 4x512 kv=8192", [(4, 512, 8192)], False),
    ("small-query 8x16 kv=8192", [(8, 16, 8192)], True),
    ("spec-verify 8x5 kv=3584", [(8, 5, 3584)], True),
    ("chunk 1x16 kv=512", [(1, 16, 512)], True),
    ("chunk 1x16 kv=1024", [(1, 16, 1024)], True),
    ("chunk 1x16 kv=2048", [(1, 16, 2048)], True),
    ("chunk 1x300 kv=2000", [(1, 300, 2000)], False),
    ("mixed 64x1 kv=2048 + 2x512 kv=4096", [(64, 1, 2048), (2, 512, 4096)], True),
    ("decodes 64x1 kv=2048", [(64, 1, 2048)], True),
    ("prefill 8x2048 hd=80", [(8, 2048, 2048)], False, 80),
    ("prefill 8x2048 hd=96", [(8, 2048, 2048)], False, 96),
    ("prefill 8x2048 hd=112", [(8, 2048, 2048)], False, 112),
    ("prefill 8x2048 hd=120", [(8, 2048, 2048)], False, 120),
    ("prefill 8x2048 hd=192", [(8, 2048, 2048)], False, 192),
    ("small-query 8x16 kv=8192 hd=80", [(8, 16, 8192)], True, 80),
]

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def measure(fn, reps):
    """The Go bench's measure: median us per call of fn over reps batches,
    each queued behind one untimed call (the lead-in), so that the host's
    time to a batch's first launch is hidden: device time per call."""
    for _ in range(3):
        fn()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()  # lead-in
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    ms = start.elapsed_time(stop)
    k = min(max(int(0.3 / max(ms, 1e-4)), 1), 64)
    times = []
    for _ in range(reps):
        fn()  # lead-in
        start.record()
        for _ in range(k):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1000 / k)
    times.sort()
    return times[len(times) // 2]


def flops(runs):
    pairs = 0
    for seqs, q, kv in runs:
        p = kv - q
        pairs += seqs * (q * p + q * (q + 1) // 2)
    return 4 * HEAD_DIM * Q_HEADS * pairs


def kv_bytes(runs, esize):
    return sum(seqs * kv for seqs, _, kv in runs) * KV_HEADS * HEAD_DIM * 2 * esize


def min_bytes(runs, esize):
    tokens = sum(seqs * q for seqs, q, _ in runs)
    return kv_bytes(runs, esize) + 2 * tokens * Q_HEADS * HEAD_DIM * esize


def rotations(l2, nbytes, most=16):
    return int(min(max((3 * l2 + nbytes - 1) // max(nbytes, 1), 1), most))


def first_line(e):
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:120]


# --- FA2 varlen -------------------------------------------------------------

def fa2_op():
    """Returns (call, name) for the flash varlen forward this torch has, or
    (None, reason). call(q, k, v, cu_q, cu_k, max_q, max_k) runs causal."""
    tried = []
    op = getattr(torch.ops.aten, "_flash_attention_forward", None)
    if op is not None:
        # aten::_flash_attention_forward(Tensor query, Tensor key, Tensor
        # value, Tensor? cum_seq_q, Tensor? cum_seq_k, SymInt max_q, SymInt
        # max_k, float dropout_p, bool is_causal, bool return_debug_mask, *,
        # float? scale=None, ...): stable positionally since torch 2.1; scale
        # became a keyword in 2.2.
        def with_scale(q, k, v, cq, ck, mq, mk):
            return op(q, k, v, cq, ck, mq, mk, 0.0, True, False, scale=1 / math.sqrt(HEAD_DIM))

        def positional(q, k, v, cq, ck, mq, mk):
            return op(q, k, v, cq, ck, mq, mk, 0.0, True, False)

        tried += [(with_scale, "aten._flash_attention_forward"), (positional, "aten._flash_attention_forward (no scale kwarg)")]
    try:
        from torch.nn.attention.varlen import varlen_attn

        def wrapper(q, k, v, cq, ck, mq, mk):
            return varlen_attn(q, k, v, cq, ck, mq, mk, is_causal=True)

        tried.append((wrapper, "nn.attention.varlen.varlen_attn"))
    except ImportError:
        pass
    if not tried:
        return None, "this torch has neither aten._flash_attention_forward nor nn.attention.varlen"
    # Probe each form on a tiny GQA problem, causal with q shorter than k.
    dev = torch.device("cuda")
    q = torch.randn(3, Q_HEADS, HEAD_DIM, dtype=torch.float16, device=dev)
    k = torch.randn(5, KV_HEADS, HEAD_DIM, dtype=torch.float16, device=dev)
    cq = torch.tensor([0, 3], dtype=torch.int32, device=dev)
    ck = torch.tensor([0, 5], dtype=torch.int32, device=dev)
    errors = []
    for call, name in tried:
        try:
            out = call(q, k, k, cq, ck, 3, 5)
            out = out[0] if isinstance(out, (tuple, list)) else out
            # Bottom-right check: query 0 attends keys 0..2 of 5.
            kk = k.repeat_interleave(Q_HEADS // KV_HEADS, dim=1).float()
            s = torch.einsum("hd,khd->hk", q[0].float(), kk) / math.sqrt(HEAD_DIM)
            ref = torch.einsum("hk,khd->hd", torch.softmax(s[:, :3], dim=-1), kk[:3])
            err = (out[0].float() - ref).norm() / ref.norm()
            if err > 1e-2:
                errors.append(f"{name}: causal is not bottom-right (rel err {err:.3g})")
                continue
            return call, name
        except Exception as e:  # noqa: BLE001 - any failure means "try the next form"
            errors.append(f"{name}: {first_line(e)}")
    return None, "; ".join(errors)


def time_fa2(call, dtype, runs, l2, reps):
    dev = torch.device("cuda")
    q_lens = [q for seqs, q, _ in runs for _ in range(seqs)]
    kv_lens = [kv for seqs, _, kv in runs for _ in range(seqs)]
    cu_q = torch.tensor([0] + list(accumulate(q_lens)), dtype=torch.int32, device=dev)
    cu_k = torch.tensor([0] + list(accumulate(kv_lens)), dtype=torch.int32, device=dev)
    total_q, total_k = sum(q_lens), sum(kv_lens)
    rot = rotations(l2, kv_bytes(runs, 2))
    q = torch.randn(total_q, Q_HEADS, HEAD_DIM, dtype=dtype, device=dev)
    ks = [torch.randn(total_k, KV_HEADS, HEAD_DIM, dtype=dtype, device=dev) for _ in range(rot)]
    vs = [torch.randn(total_k, KV_HEADS, HEAD_DIM, dtype=dtype, device=dev) for _ in range(rot)]
    max_q, max_k = max(q_lens), max(kv_lens)
    i = [0]

    def run():
        j = i[0] % rot
        i[0] += 1
        return call(q, ks[j], vs[j], cu_q, cu_k, max_q, max_k)

    return measure(run, reps), "1 varlen call"


def accumulate(xs):
    total = 0
    for x in xs:
        total += x
        yield total


# --- cuDNN SDPA -------------------------------------------------------------

def lower_right_mask(q_len, kv_len, dtype, dev):
    """The additive form of causal_lower_right(q_len, kv_len): 0 where query
    i may attend key j (j <= kv_len - q_len + i), -inf elsewhere. Built once
    per shape, so no call converts a bool mask or builds one in the timing."""
    # torch.nn.attention.bias.causal_lower_right materializes exactly this.
    keep = torch.ones(q_len, kv_len, dtype=torch.bool, device=dev).tril_(kv_len - q_len)
    return torch.zeros(q_len, kv_len, dtype=dtype, device=dev).masked_fill_(~keep, float("-inf"))


def sdpa_args(q_len, kv_len, dtype, dev):
    """SDPA's keyword arguments for the bottom-right causal mask."""
    if q_len == kv_len:
        return {"is_causal": True}
    if q_len == 1:
        return {}  # one query at the bottom row attends every key
    return {"attn_mask": lower_right_mask(q_len, kv_len, dtype, dev)}


def time_cudnn(dtype, runs, l2, reps):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = torch.device("cuda")
    rot = rotations(l2, kv_bytes(runs, 2))
    group = Q_HEADS // KV_HEADS
    parts = []  # per run: q, [k sets], [v sets], SDPA keywords
    for seqs, q_len, kv_len in runs:
        q = torch.randn(seqs, Q_HEADS, q_len, HEAD_DIM, dtype=dtype, device=dev)
        ks = [torch.randn(seqs, KV_HEADS, kv_len, HEAD_DIM, dtype=dtype, device=dev) for _ in range(rot)]
        vs = [torch.randn(seqs, KV_HEADS, kv_len, HEAD_DIM, dtype=dtype, device=dev) for _ in range(rot)]
        parts.append((q, ks, vs, sdpa_args(q_len, kv_len, dtype, dev)))
    notes = []
    if any("attn_mask" in kw for *_, kw in parts):
        notes.append("lower-right additive mask")
    if len(parts) > 1:
        notes.append(f"{len(parts)} SDPA calls")
    errors = []
    for gqa in (True, False):
        if not gqa:
            # Expanded K/V read 4x the bytes: the line says so.
            parts = [(q, [k.repeat_interleave(group, dim=1) for k in ks], [v.repeat_interleave(group, dim=1) for v in vs], kw)
                     for q, ks, vs, kw in parts]
        extra = {"enable_gqa": True} if gqa else {}
        i = [0]

        def run():
            j = i[0] % rot
            i[0] += 1
            for q, ks, vs, kw in parts:
                F.scaled_dot_product_attention(q, ks[j], vs[j], **kw, **extra)

        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                us = measure(run, reps)
            return us, ", ".join(notes + ["enable_gqa" if gqa else "K/V expanded to 32 heads"]), None
        except Exception as e:  # noqa: BLE001 - cuDNN refusing a shape is a result
            errors.append(("enable_gqa: " if gqa else "expanded K/V: ") + first_line(e))
    return None, None, "; ".join(errors)


# --- main -------------------------------------------------------------------

def parse_args(argv):
    """Returns the checked arguments, and the dtypes and backends as lists;
    needs no GPU."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH (for pagedkv chart)")
    ap.add_argument("--reps", type=int, default=15, help="timed batches per measurement, 3 or more (the median is reported)")
    ap.add_argument("--dtypes", default="bf16,f16", help="comma-separated: bf16, f16")
    ap.add_argument("--backends", default="fa2,cudnn", help="comma-separated: fa2, cudnn")
    args = ap.parse_args(argv)
    if args.reps < 3:
        ap.error(f"--reps={args.reps} is not allowed; allowed: 3 or more")
    dtypes = [d.strip() for d in args.dtypes.split(",")]
    backends = [b.strip() for b in args.backends.split(",")]
    for d in dtypes:
        if d not in DTYPES:
            ap.error(f"--dtypes={args.dtypes!r} is not allowed; allowed: a comma-separated list of bf16, f16")
    for b in backends:
        if b not in ("fa2", "cudnn"):
            ap.error(f"--backends={args.backends!r} is not allowed; allowed: a comma-separated list of fa2, cudnn")
    if args.json and not os.path.isdir(os.path.dirname(args.json) or "."):
        # Checked before minutes of timing, as pagedkv bench -json is.
        ap.error(f"--json={args.json!r} is not allowed; allowed: a file in an existing folder")
    return args, dtypes, backends


def main(argv=None):
    args, dtypes, backends = parse_args(sys.argv[1:] if argv is None else argv)
    if not torch.cuda.is_available():
        print("torch_varlen: no CUDA device visible to torch", file=sys.stderr)
        return 1

    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    l2 = getattr(props, "L2_cache_size", 0) or 50 << 20
    n = 1 << 30  # 1 GiB a side, as the Go bench's copy row
    src = torch.empty(n, dtype=torch.uint8, device=dev).fill_(0x3C)
    dst = torch.empty_like(src)
    copy_us = measure(lambda: dst.copy_(src), args.reps)
    copy_gbps = 2 * n / copy_us / 1e3
    del src, dst
    print(f"torch {torch.__version__} on {props.name}: copy {copy_gbps:.0f} GB/s (bytes read + written), L2 {l2 >> 20} MiB")

    report = {"device": props.name, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "copy_gbps": copy_gbps, "results": []}
    fa2, fa2_name = (None, None)
    if "fa2" in backends:
        fa2, fa2_name = fa2_op()
        if fa2 is None:
            print(f"fa2: not available ({fa2_name})")
        else:
            print(f"fa2: {fa2_name}")
    for backend in backends:
        if backend == "fa2" and fa2 is None:
            continue
        for dname in dtypes:
            dtype = DTYPES[dname]
            for shape, runs, memory_bound, *hd in SHAPES:
                # A shape's head dim, when it names one (HEAD_DIM is what
                # the timing functions and flops() read).
                global HEAD_DIM
                HEAD_DIM = hd[0] if hd else 128
                label = f"{backend} {dname} {shape}"
                try:
                    if backend == "fa2":
                        us, note = time_fa2(fa2, dtype, runs, l2, args.reps)
                    else:
                        us, note, err = time_cudnn(dtype, runs, l2, args.reps)
                        if us is None:
                            print(f"{label}: not available ({err})")
                            continue
                except Exception as e:  # noqa: BLE001 - report and go on
                    print(f"{label}: failed ({first_line(e)})")
                    continue
                finally:
                    torch.cuda.empty_cache()
                tflops = flops(runs) / us / 1e6
                res = {"peer": backend, "op": "varlen", "dtype": dname, "shape": shape, "plan": note, "us": us, "tflops": tflops}
                line = f"{label}: {us:.2f} us, {tflops:.1f} TFLOP/s"
                if memory_bound:
                    gbps = min_bytes(runs, 2) / us / 1e3
                    res["gbps"], res["pct_copy"] = gbps, 100 * gbps / copy_gbps
                    line += f", {gbps:.0f} GB/s, {res['pct_copy']:.1f}% of copy"
                print(f"{line} ({note})", flush=True)
                report["results"].append(res)

    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")

    rows = [("backend", "dtype", "shape", "us", "TFLOP/s", "% copy", "how")]
    for r in report["results"]:
        pct = f"{r['pct_copy']:.1f}" if "pct_copy" in r else "-"
        rows.append((r["peer"], r["dtype"], r["shape"], f"{r['us']:.2f}", f"{r['tflops']:.1f}", pct, r["plan"]))
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    print()
    for row in rows:
        cells = [row[c].ljust(widths[c]) if c in (0, 1, 2, 6) else row[c].rjust(widths[c]) for c in range(len(row))]
        print("  ".join(cells).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
