#!/usr/bin/env bash
# lab/ab/ptxas-jit-proxy.sh PTX [KERNEL-REGEX]: registers and spills of each
# entry of PTX as ptxas 12.4 assembles it for sm_90. On the H200 the varlen
# and fp8 decode modules run the driver's JIT (CUDA 13.0) of their PTX, not
# ptxas 11.8's cubins, and the two allocate registers differently; ptxas 12.4
# (Debian trixie's nvidia-cuda-toolkit) reported the same spills as the
# device's ptxas 13.0 for both builds compared in session 19 (0/0 and 52/76
# bytes for paged_varlen_bf16_hd128), where ptxas 11.8 said 0/0 and 28/60.
# The first run downloads the package (about 2 minutes) into
# ${PTXAS_PROXY_DIR:-/tmp/ptxas-proxy} without installing it.
set -euo pipefail
dir=${PTXAS_PROXY_DIR:-/tmp/ptxas-proxy}
ptxas=$dir/x/usr/bin/ptxas
if [ ! -x "$ptxas" ]; then
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  cat >"$dir/trixie.sources" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  a=(-o "Dir::Etc::sourcelist=$dir/trixie.sources" -o Dir::Etc::sourceparts=- -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache")
  apt-get "${a[@]}" update >/dev/null
  (cd "$dir" && apt-get "${a[@]}" download nvidia-cuda-toolkit >/dev/null && dpkg -x nvidia-cuda-toolkit_*.deb x)
fi
"$ptxas" -arch=sm_90 -O3 -v "$1" -o /dev/null 2>&1 |
  awk -v re="${2:-.}" '/Function properties for/{f=$NF} /spill stores/{sp=$5"/"$9" B spilled (stores/loads)"}
    /Used/ && f ~ re {print f, $5, "registers,", sp}'
