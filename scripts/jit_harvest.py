#!/usr/bin/env python3
"""jit_harvest.py turns a CUDA driver JIT cache into pagedkv's recorded JIT
images: ptx/<module>.sm_<arch>.jit.cubin.gz and ptx/jit.json. Modules the
cache lacks keep the images recorded for their current PTX.

The driver's JIT of a module's PTX (cuModuleLoadData) makes faster code on
sm_90 than any offline ptxas, and the driver's linker (cuLink*) makes yet
other code, so the images are taken from the JIT cache itself: on a GPU
machine, load every module's PTX with an empty cache,

    CUDA_CACHE_PATH=/tmp/cc CUDA_CACHE_MAXSIZE=4294967296 \
        PAGEDKV_LOAD_SASS=0 pagedkv info && tar -C /tmp -czf cc.tgz cc

(scripts/gpu.sh STEPS=jitharvest, which returns the archive in pieces,
cc.tgz.part.aa, .ab, ...: a path that does not exist is read as the
concatenation of path.part.*), then here

    python3 scripts/jit_harvest.py cc.tgz <arch> <driver_version> "<device>"

Each cache entry ends in the ELF cubin the JIT made; its kernel names pick
the module (the manifest's entry list). Only the modules whose ptxas SASS
runs slower than the JIT's code on that architecture (ptx/embed.go,
jitFaster) are written. go test ./ptx checks every image against the PTX it
came from.
"""
import glob, gzip, hashlib, io, json, os, re, struct, sys, tarfile

def elf_tail(b):
    i = b.find(b"\x7fELF")
    if i < 0:
        return None
    e = b[i:]
    shoff, = struct.unpack_from("<Q", e, 0x28)
    phoff, = struct.unpack_from("<Q", e, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", e, 0x36)
    end = max(shoff + shnum * shentsize, phoff + phnum * phentsize)
    for k in range(shnum):
        off = shoff + k * shentsize
        sh_type, = struct.unpack_from("<I", e, off + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", e, off + 0x18)
        if sh_type != 8:  # SHT_NOBITS occupies no file bytes
            end = max(end, sh_offset + sh_size)
    return e[:end]

def made_from(entry, ptx):
    """Whether a JIT cache entry was made from exactly ptx: the entry
    stores its source PTX, NUL-terminated, ahead of the cubin."""
    i = entry.find(ptx)
    elf = entry.find(b"\x7fELF")
    return 0 <= i and i + len(ptx) < elf and entry[i + len(ptx)] == 0

def jit_faster(arch):
    src = open("ptx/embed.go").read()
    m = re.search(r"var jitFaster = map\[int\]\[\]string\{(.*?)\n\}", src, re.S)
    block = re.search(r"\b%d:\s*\{(.*?)\}" % arch, m.group(1), re.S)
    return set(re.findall(r'"([a-z0-9_]+)"', block.group(1))) if block else set()

def main():
    tgz, arch, driver, device = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    manifest = json.load(open("ptx/manifest.json"))
    by_entries = {frozenset(m["entries"]): m["name"] for m in manifest["modules"]}
    wanted = jit_faster(arch)
    images = []
    if os.path.exists(tgz):
        archive = open(tgz, "rb").read()
    else:
        parts = sorted(glob.glob(glob.escape(tgz) + ".part.*"))
        if not parts:
            sys.exit("jit_harvest: neither %s nor %s.part.* exists" % (tgz, tgz))
        archive = b"".join(open(p, "rb").read() for p in parts)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tf:
        for member in tf:
            if not member.isfile():
                continue
            entry = tf.extractfile(member).read()
            elf = elf_tail(entry)
            if elf is None:
                continue
            names = frozenset(n.decode() for n in re.findall(rb"\.text\.([A-Za-z0-9_]+)\x00", elf))
            module = by_entries.get(names)
            if module is None or module not in wanted:
                continue
            # The entry holds the PTX it was compiled from ahead of the
            # cubin: only an entry of the module's current PTX is its code
            # (a cache from another build has the same kernel names).
            if not made_from(entry, open("ptx/%s.ptx" % module, "rb").read()):
                print("jit_harvest: skipped a cache entry of %s made from other PTX" % module)
                continue
            path = "ptx/%s.sm_%d.jit.cubin.gz" % (module, arch)
            buf = io.BytesIO()
            with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as g:
                g.write(elf)
            open(path, "wb").write(buf.getvalue())
            ptx = open("ptx/%s.ptx" % module, "rb").read()
            images.append({"module": module, "arch": "sm_%d" % arch, "device": device, "driver_version": driver,
                           "ptx_sha256": hashlib.sha256(ptx).hexdigest(),
                           "sha256": hashlib.sha256(elf).hexdigest(), "size": len(elf)})
    # A module the cache lacks keeps its recorded image while its PTX is
    # the one that image came from (a harvest of only the changed modules:
    # pagedkv info in auto mode JITs just the JITFaster modules without one).
    found = {i["module"] for i in images}
    if os.path.exists("ptx/jit.json"):
        for old in json.load(open("ptx/jit.json"))["images"]:
            ptx = open("ptx/%s.ptx" % old["module"], "rb").read()
            if old["module"] in wanted - found and old["arch"] == "sm_%d" % arch and \
                    old["ptx_sha256"] == hashlib.sha256(ptx).hexdigest():
                images.append(old)
    missing = wanted - {i["module"] for i in images}
    if missing:
        sys.exit("jit_harvest: no cache entry for %s" % ", ".join(sorted(missing)))
    images.sort(key=lambda i: (i["module"], i["arch"]))
    with open("ptx/jit.json", "w") as f:
        f.write(json.dumps({"images": images}, indent=2) + "\n")
    print("wrote %d images" % len(images))

main()
