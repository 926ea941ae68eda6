"""Dense decode attention in PyTorch (cuDNN and FlashAttention-2 backends of
scaled_dot_product_attention) on pagedkv's bench shapes, for side-by-side
ratios: run it in the same device call as `pagedkv bench decode`.

Shape: 32 query heads, 8 KV heads, head dim 128, f16, one query token per
sequence, K and V dense [seqs, 8, kv, 128]. Bytes = K + V read. Prints one
line per (backend, shape): µs (median of CUDA-event timings) and % of the
device-to-device copy bandwidth measured here. Last, per shape, a floor:
one reduction kernel (torch.sum, f32 accumulation) reading the same bytes
as one contiguous f16 tensor, which no attention kernel reading them can
beat by much; it shows how much of a small shape's time is the launch's
own ramp and drain rather than attention. A second floor reads half those
bytes: the same shape's K and V in an fp8 e4m3 cache (dtype "e4m3"), for
`pagedkv bench decode -cache e4m3` rows.

Shapes are SEQSxKV arguments (default 1x8192 1x32768 8x8192 32x2048
128x512). With --json PATH the rows are also written to PATH, each as
{"peer", "op": "decode", "dtype", "shape", "us", "gbps", "pct_copy"} under
"results", beside the device, torch version, date and copy bandwidth; the
shape is named as `pagedkv bench decode` names the same problem
("seqs=8 kv=8192"), so `pagedkv chart` joins the rows on (op, dtype, shape).
The read floor's rows have peer "read-floor".

usage: python3 scripts/compare/torch_decode.py [--json PATH] [SEQSxKV ...]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def median_us(fn, reps=50, inner=20):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(inner):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000 / inner)
    times.sort()
    return times[len(times) // 2]


DEFAULT_SHAPES = [(1, 8192), (1, 32768), (8, 8192), (32, 2048), (128, 512)]


def shape_name(seqs, kv):
    """The shape as pagedkv bench decode names its row of the same problem."""
    return f"seqs={seqs} kv={kv}"


def parse_args(argv):
    """Returns the arguments and the (seqs, kv) shapes; needs no GPU."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="*", metavar="SEQSxKV",
                    help="sequences x KV length, e.g. 8x8192 (default: " + " ".join(f"{s}x{k}" for s, k in DEFAULT_SHAPES) + ")")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON to PATH (for pagedkv chart)")
    args = ap.parse_intermixed_args(argv)
    shapes = []
    for text in args.shapes:
        parts = text.split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
            ap.error(f"shape {text!r} is not allowed; allowed: SEQSxKV, two positive integers such as 8x8192")
        shapes.append((int(parts[0]), int(parts[1])))
    if args.json and not os.path.isdir(os.path.dirname(args.json) or "."):
        # Checked before minutes of timing, as pagedkv bench -json is.
        ap.error(f"--json={args.json!r} is not allowed; allowed: a file in an existing folder")
    return args, shapes or list(DEFAULT_SHAPES)


def main(argv=None):
    args, shapes = parse_args(sys.argv[1:] if argv is None else argv)
    dev = torch.device("cuda")
    props = torch.cuda.get_device_properties(dev)
    n = 1 << 28  # 512 MiB of f16 per copy side
    src = torch.empty(n, dtype=torch.float16, device=dev).fill_(1.0)
    dst = torch.empty_like(src)
    copy_us = median_us(lambda: dst.copy_(src), reps=20, inner=5)
    copy_gbps = 2 * n * 2 / copy_us / 1e3
    print(f"torch copy: {copy_gbps:.0f} GB/s")
    report = {"device": props.name, "torch": torch.__version__, "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "copy_gbps": copy_gbps, "results": []}

    def row(peer, seqs, kv, us, gbps, dtype="f16"):
        report["results"].append({"peer": peer, "op": "decode", "dtype": dtype, "shape": shape_name(seqs, kv),
                                  "us": us, "gbps": gbps, "pct_copy": 100 * gbps / copy_gbps})

    for backend, name in [(SDPBackend.CUDNN_ATTENTION, "cudnn"), (SDPBackend.FLASH_ATTENTION, "fa2")]:
        for seqs, kv in shapes:
            # Rotate enough K/V sets that the working set exceeds L2.
            kv_bytes = 2 * seqs * 8 * kv * 128 * 2
            rot = max(1, min(16, (3 * 60 * 2**20) // kv_bytes + 1))
            q = torch.randn(seqs, 32, 1, 128, dtype=torch.float16, device=dev)
            ks = [torch.randn(seqs, 8, kv, 128, dtype=torch.float16, device=dev) for _ in range(rot)]
            vs = [torch.randn(seqs, 8, kv, 128, dtype=torch.float16, device=dev) for _ in range(rot)]
            i = [0]

            def run():
                j = i[0] % rot
                i[0] += 1
                return F.scaled_dot_product_attention(q, ks[j], vs[j], enable_gqa=True)

            try:
                with sdpa_kernel(backend):
                    us = median_us(run)
            except RuntimeError as e:
                print(f"{name} seqs={seqs} kv={kv}: not available ({str(e).splitlines()[0][:80]})")
                continue
            gbps = kv_bytes / us / 1e3
            print(f"{name} seqs={seqs} kv={kv}: {us:.2f} us, {gbps:.0f} GB/s, {100 * gbps / copy_gbps:.1f}% of copy")
            row(name, seqs, kv, us, gbps)
            del ks, vs
    for dtype, elem in (("f16", 2), ("e4m3", 1)):
        for seqs, kv in shapes:
            kv_bytes = 2 * seqs * 8 * kv * 128 * elem
            rot = max(1, min(16, (3 * 60 * 2**20) // kv_bytes + 1))
            xs = [torch.randn(kv_bytes // 2, dtype=torch.float16, device=dev) for _ in range(rot)]
            i = [0]

            def read():
                j = i[0] % rot
                i[0] += 1
                return torch.sum(xs[j], dtype=torch.float32)

            us = median_us(read)
            gbps = kv_bytes / us / 1e3
            label = "read floor" if dtype == "f16" else "read floor e4m3"
            print(f"{label} seqs={seqs} kv={kv} ({kv_bytes / 1e6:.0f} MB): {us:.2f} us, {gbps:.0f} GB/s, {100 * gbps / copy_gbps:.1f}% of copy")
            row("read-floor", seqs, kv, us, gbps, dtype)
            del xs
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
