# generates wgmma wrappers
def ss(n):
    nreg = n // 2
    regs = ",".join(f"%{i}" for i in range(nreg))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nreg))
    return f'''__device__ __forceinline__ void wgmma_ss_n{n}(float (&d)[{nreg}], uint64_t da, uint64_t db, int scale_d) {{
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nreg+2}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, %{nreg}, %{nreg+1}, p, 1, 1, 0, 0;\\n}}\\n"
    : {outs}
    : "l"(da), "l"(db), "r"(scale_d));
}}
'''
def rs(n):
    nreg = n // 2
    regs = ",".join(f"%{i}" for i in range(nreg))
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nreg))
    return f'''__device__ __forceinline__ void wgmma_rs_n{n}(float (&d)[{nreg}], const uint32_t (&a)[4], uint64_t db) {{
  asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nreg+5}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, {{%{nreg},%{nreg+1},%{nreg+2},%{nreg+3}}}, %{nreg+4}, p, 1, 1, 1;\\n}}\\n"
    : {outs}
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(1));
}}
'''
print("#pragma once\n#include <cstdint>")
for n in (64, 128): print(ss(n))
print(rs(128))
