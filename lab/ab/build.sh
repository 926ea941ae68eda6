#!/usr/bin/env bash
# lab/ab/build.sh NAME=PATCH ...: an A/B build of pagedkv and the GPU tests
# for one device call. It copies the tree (tracked files) to a scratch
# directory, applies lab/ab/harness.patch there (ptx/embed.go reads module
# files from ptx/ab/$AB_VARIANT/ where they exist), and for each NAME=PATCH
# applies PATCH (a path in this repository, or an absolute one) to another
# copy, regenerates its PTX and cubins with ptxgen (nvcc 11.8, about
# two minutes) and puts the files that differ from main's under
# ptx/ab/NAME/. The binaries land in .gpu/ (xz-compressed; .gpu/ is
# ignored): pagedkv and tests.test run main's kernels, and the variant's
# with AB_VARIANT=NAME. A patch's Go changes are not part of the variant:
# an A/B build compares kernels of the same names and parameters (a kernel
# whose geometry the planner must know needs its own entry, as the _k64
# ones have).
#
#   git diff HEAD 7ac247a -- kernels_src/decode.cuh >/tmp/d18.patch
#   lab/ab/build.sh d18=/tmp/d18.patch
#   # on the device: cd .gpu && xz -d -f *.xz && cd .. &&
#   #   for v in none d18 d18 none; do AB_VARIANT=$v .gpu/pagedkv bench decode ...; done
#
# Keep carry under 64 MiB with the tracked tree (about 36 MB): each variant
# adds its changed PTX (compressed with the binaries) and cubins; carry one
# binary per call if both do not fit.
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
  case $patch in /*) ;; *) patch=$root/$patch ;; esac
  (cd "$v" && git apply "$patch" && go run ./cmd/ptxgen >/dev/null)
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
