#!/usr/bin/env bash
# lab/ab/build.sh NAME=PATCH ...: an A/B build of pagedkv and the GPU tests
# for one device call. It copies the tree (tracked files) to a scratch
# directory, applies lab/ab/harness.patch there (ptx/embed.go reads module
# files from ptx/ab/$AB_VARIANT/ where they exist; dispatch/names.go gives
# the varlen 128-row kernels at head dim 128 over 16-bit caches 64-key tiles
# when $AB_VARIANT starts with "k64", as lab/pending/varlen-k64.patch does),
# and for each NAME=PATCH applies PATCH (a path in this repository) to
# another copy, regenerates its PTX and cubins with ptxgen (nvcc 11.8, about
# two minutes) and puts the files that differ from main's under
# ptx/ab/NAME/. The binaries land in .gpu/ (xz-compressed; .gpu/ is
# ignored): pagedkv and tests.test run main's kernels, and the variant's
# with AB_VARIANT=NAME. A patch's Go changes other than the varlen tile
# geometry are not part of the variant: an A/B build compares kernels.
#
#   lab/ab/build.sh k64=lab/pending/varlen-k64.patch split=lab/pending/varlen-split-loops.patch
#   # on the device: cd .gpu && xz -d -f *.xz && cd .. &&
#   #   for v in none k64 split split k64 none; do AB_VARIANT=$v .gpu/pagedkv bench varlen ...; done
#
# Keep carry under 64 MiB: each variant adds its changed PTX (compressed
# with the binaries) and cubins.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
copy() { # copy the tracked tree to $1
  mkdir -p "$1"
  (cd "$root" && git ls-files -z | xargs -0 cp --parents -t "$1")
}
copy "$scratch/ab"
(cd "$scratch/ab" && git apply "$root/lab/ab/harness.patch")
mkdir -p "$scratch/ab/ptx/ab"
for spec in "$@"; do
  name=${spec%%=*} patch=${spec#*=}
  v="$scratch/v-$name"
  copy "$v"
  (cd "$v" && git apply "$root/$patch" && go run ./cmd/ptxgen >/dev/null)
  mkdir -p "$scratch/ab/ptx/ab/$name"
  for f in "$v"/ptx/*.ptx "$v"/ptx/*.cubin.gz; do
    b=$(basename "$f")
    cmp -s "$f" "$root/ptx/$b" || cp "$f" "$scratch/ab/ptx/ab/$name/$b"
  done
  echo "ab: $name: $(ls "$scratch/ab/ptx/ab/$name" | wc -l) files differ from main's"
done
mkdir -p "$root/.gpu"
(cd "$scratch/ab" &&
  CGO_ENABLED=0 go test -c -ldflags='-s -w' -o "$root/.gpu/tests.test" ./tests &&
  CGO_ENABLED=0 go build -ldflags='-s -w' -o "$root/.gpu/pagedkv" ./cmd/pagedkv)
(cd "$root/.gpu" && rm -f tests.test.xz pagedkv.xz && xz -T4 -9 tests.test pagedkv)
ls -l "$root/.gpu"
