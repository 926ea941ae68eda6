TY = {"__half": "f16", "__nv_bfloat16": "bf16"}
out = []
def regs(n): return ",".join(f"%{i}" for i in range(n))
def outs(nreg): return ", ".join(f'"+f"(d[{i//4}][{i%4}])' for i in range(nreg))
def ss(t, n):
    nreg = n // 2
    return f'''template <>
__device__ __forceinline__ void wgmma_ss<{t}, {n}>(float (&d)[{n // 8}][4], uint64_t a, uint64_t b, int accumulate) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nreg + 2}, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{TY[t]}.{TY[t]} {{{regs(nreg)}}}, %{nreg}, %{nreg + 1}, p, 1, 1, 0, 0;\\n}}\\n"
      : {outs(nreg)}
      : "l"(a), "l"(b), "r"(accumulate));
}}
'''
def rs(t, n):
    nreg = n // 2
    return f'''template <>
__device__ __forceinline__ void wgmma_rs<{t}, {n}>(float (&d)[{n // 8}][4], const uint32_t (&a)[4], uint64_t b) {{
  asm volatile(
      "{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"
      "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{TY[t]}.{TY[t]} {{{regs(nreg)}}}, {{%{nreg},%{nreg + 1},%{nreg + 2},%{nreg + 3}}}, %{nreg + 4}, p, 1, 1, 1;\\n}}\\n"
      : {outs(nreg)}
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
}}
'''
for t in TY:
    for n in (32, 64):
        out.append(ss(t, n))
    for n in (64, 128):
        out.append(rs(t, n))
print("\n".join(out))
