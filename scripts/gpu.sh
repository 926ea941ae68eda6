#!/usr/bin/env bash
# gpu.sh runs everything that needs a GPU, from binaries built elsewhere by
# scripts/build-gpu.sh (whose SHA-256 prefixes the summary repeats).
# It writes logs under $OUT (default ./gpu-out) and prints a short summary last.
# Steps: info, tests (every test group in its own process, all at once),
# verify, bench, then the GPU tests under compute-sanitizer
# (memcheck and racecheck) on a reduced set. STEPS="info tests bench sanitize"
# selects steps; BENCH_ARGS passes flags to pagedkv bench. jitharvest
# collects the driver JIT's code for ptx/ into $OUT/cc.tgz.part.* (pieces
# of 12 MiB: the device tool returns no file over 16 MiB; then
# scripts/jit_harvest.py $OUT/cc.tgz).
# Tests and bench load modules as PAGEDKV_LOAD_SASS says (auto by default:
# the recorded JIT code, else SASS except where the driver's JIT makes
# faster code). Three more steps measure the load
# paths: coldstart (run it first on a fresh machine: module
# loads with every SASS, then the PTX JIT cold and again with the driver's
# JIT cache warm), and sass and ptx (the GPU tests and the bench with every
# module's SASS, and with the PTX only, for an A/B in one call). sanitize-all
# runs every GPU test under memcheck and racecheck, every group in its own
# process at once (TOOLS and SAN_GROUPS narrow it; about 8 minutes).
# profile runs Nsight Compute on single bench rows (PROFILE, see below).
# PACK=0 keeps every log as its own file (see the end).
set -u
OUT=${OUT:-./gpu-out}
mkdir -p "$OUT"
STEPS=${STEPS:-"info tests verify bench sanitize"}
summary=()
run() { # name timeout cmd...
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - start)))")
  return $rc
}
# runbg is run in the background: its summary line waits in a file until
# waitbg, which waits for every runbg and adds their lines to the summary.
runbg() { # name timeout cmd...
  (
    local name=$1 limit=$2; shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    printf '%-10s rc=%-3s %4ss\n' "$name" "$?" $((SECONDS - start)) >>"$OUT/bg-summary.txt"
  ) &
}
waitbg() {
  wait
  [ -f "$OUT/bg-summary.txt" ] && mapfile -t -O "${#summary[@]}" summary <"$OUT/bg-summary.txt"
  rm -f "$OUT/bg-summary.txt"
}
export PAGEDKV_TEST_SEED=${PAGEDKV_TEST_SEED:-}
# The GPU test groups (tests and sanitize-all run one process per group): the
# serving tests apart from the other decode tests, and a last group, rest, for
# every test no other group names (streams, events, copies), so a new test
# always runs somewhere.
serving='TestDecodeBalanced|TestDecodeGraphAfterGrowth|TestDecodeExternalCapture|TestDecodeWorkspace|TestDecodeFP8Narrow|TestHostPath'
# TestVarlenMatchesReference has a group of its own: it alone takes 3-4
# minutes of the host's CPU (the float64 reference).
groups=('TestAppend|TestGather' 'TestRope' 'TestMLA' 'TestQKV' 'TestDecode' "$serving" 'TestVarlenMatchesReference' 'TestVarlen|TestSequenceAttention')
names=(TestAppend TestRope TestMLA TestQKV TestDecode TestDecodeBalanced TestVarlenRef TestVarlen)
skips=('^$' '^$' '^$' '^$' "$serving" '^$' '^$' 'TestVarlenMatchesReference')
named=$(IFS='|'; echo "${groups[*]}")
groups+=('.'); names+=(rest); skips+=("$named")
for step in $STEPS; do
  case $step in
  info) run info 120 .gpu/pagedkv info ;;
  tests)
    # One process per group, so a fault in one cannot hide the others'
    # results, all at once (one after another they took longer than a
    # device call may run), each limited to TEST_LIMIT seconds (240).
    lim=${TEST_LIMIT:-240}
    for i in "${!groups[@]}"; do
      runbg "tests-${names[$i]}" "$lim" .gpu/tests.test -test.v -test.run "${groups[$i]}" -test.skip "${skips[$i]}" \
        -test.timeout "$((lim - 5))s"
    done
    waitbg
    for i in "${!groups[@]}"; do
      cat "$OUT/tests-${names[$i]}.log" >>"$OUT/tests.log"; rm -f "$OUT/tests-${names[$i]}.log"
    done
    ;;
  verify) run verify 240 .gpu/pagedkv verify -n 25 ;;
  jitharvest)
    # The driver JIT's own code for ptx/: every module's PTX loaded into an
    # empty JIT cache, returned as $OUT/cc.tgz in pieces (cc.tgz.part.aa,
    # ...); scripts/jit_harvest.py reads them back and turns the cache into
    # ptx/*.jit.cubin.gz and ptx/jit.json.
    rm -rf /tmp/pagedkv-cc
    CUDA_CACHE_PATH=/tmp/pagedkv-cc CUDA_CACHE_MAXSIZE=4294967296 PAGEDKV_LOAD_SASS=0 \
      run jit-harvest 300 .gpu/pagedkv info && tar -C /tmp -czf - pagedkv-cc | split -b 12M - "$OUT/cc.tgz.part."
    ;;
  coldstart)
    PAGEDKV_LOAD_SASS=1 run info-sass 120 .gpu/pagedkv info
    run info-ptx-cold 120 .gpu/pagedkv info
    run info-ptx-warm 120 .gpu/pagedkv info
    ;;
  sass | ptx)
    mode=1
    [ "$step" = ptx ] && mode=0
    PAGEDKV_LOAD_SASS=$mode run "tests-$step" 240 .gpu/tests.test -test.run 'TestDecodeMatchesReference|TestVarlen|TestAppend|TestRope|TestQKV|TestMLA' -test.timeout 235s
    PAGEDKV_LOAD_SASS=$mode run "bench-$step" 280 .gpu/pagedkv bench -json "$OUT/bench-$step.json" ${BENCH_ARGS:-}
    ;;
  sanitize-all)
    # Every GPU test under each tool in TOOLS (default: memcheck racecheck),
    # every (tool, group) in its own process, all at once (16 processes on
    # one H200 take about 8 minutes; racecheck's decode group is cut in four,
    # as its graph and concurrent-stream tests together take 8 minutes under
    # it); SAN_GROUPS picks groups by name (default: all of
    # them, see names above), SAN_LIMIT is each process's time limit.
    dsplit='TestDecodeMatchesReference|TestDecodeGraphReplay|TestDecodeConcurrentStreams'
    for tool in ${TOOLS:-memcheck racecheck}; do
      for i in "${!groups[@]}"; do
        case " ${SAN_GROUPS:-${names[*]}} " in *" ${names[$i]} "*) ;; *) continue ;; esac
        sg=("${groups[$i]}") ss=("${skips[$i]}") sn=("${names[$i]}")
        if [ "${names[$i]}" = TestDecode ]; then
          sg=(TestDecodeMatchesReference TestDecodeGraphReplay TestDecodeConcurrentStreams TestDecode)
          ss=('^$' '^$' '^$' "${skips[$i]}|$dsplit")
          sn=(TestDecode-ref TestDecode-graph TestDecode-streams TestDecode-rest)
        fi
        for j in "${!sg[@]}"; do
          runbg "$tool-${sn[$j]}" "${SAN_LIMIT:-560}" env PAGEDKV_TEST_SEED="${PAGEDKV_TEST_SEED:-7}" \
            compute-sanitizer --tool "$tool" --error-exitcode 9 .gpu/tests.test -test.v -test.run "${sg[$j]}" \
            -test.skip "${ss[$j]}" -test.timeout "$((${SAN_LIMIT:-560} - 5))s"
        done
      done
    done
    waitbg
    ;;
  profile)
    # Nsight Compute on single bench rows, one process per row: PROFILE holds
    # lines "op;row regexp (bench -shape);kernel regexp"; the profiled launch
    # is the 4th of the matching kernels (the row's plan, after warm-up).
    # The metrics add DRAM bytes and L2 sector counts: a store of half
    # sectors shows as more L2 sectors than bytes/32, and a partial sector
    # L2 must fill from DRAM as read bytes a write-only stream should not have.
    ncu_metrics=dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum
    i=0
    while IFS=';' read -r op shape kern; do
      [ -z "$op" ] && continue
      i=$((i + 1))
      run "ncu-$i" 150 ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats \
        --section InstructionStats --metrics "$ncu_metrics" -k "regex:$kern" --launch-skip 3 --launch-count 1 \
        .gpu/pagedkv bench "$op" -shape "$shape" -nosweep -reps 3
      sed -i "1i PROFILE $op;$shape;$kern" "$OUT/ncu-$i.log"
    done <<<"${PROFILE:-"decode;^f16 seqs=1 kv=32768$;paged_decode
decode;^f16 seqs=32 kv=8192$;paged_decode
decode;^e4m3 seqs=8 kv=8192$;paged_decode
decode;^e4m3 seqs=128 kv=512$;paged_decode
append;T=4096 .*flash prefill slots e4m3$;cache_append
append;T=4096 .*flash prefill slots$;cache_append
append;qkv.*T=65536 .*flash$;qkv_norm_rope
append;qkv.*T=65536 .*x-split$;qkv_norm_rope
append;qkv.*T=65536 .*x-split$;qkv_values
decode;^f16 seqs=8 kv=8192 64/4 heads$;paged_decode"}"
    ;;
  bench) run bench 280 .gpu/pagedkv bench -json "$OUT/bench.json" ${BENCH_ARGS:-} ;;
  sanitize)
    reduced='TestAppendMatchesReference|TestAppendFP8|TestAppendFaults|TestRopeCache|TestMLA|TestQKV|TestDecodeMatchesReference|TestDecodeFaults|TestDecodeGraphReplay|TestDecodeClusterPlans|TestDecodeRingDepths|TestDecodeGraphAfterGrowth|TestDecodeExternalCapture|TestDecodeBalanced|TestDecodeWorkspace|TestDecodeFP8Narrow|TestVarlenMatchesReference|TestVarlenFaults|TestVarlenGraphReplay|TestVarlenEqualsDecode|TestSequenceAttention|TestVarlenWorkspace|TestVarlenMixedBatch|TestVarlenModsWindowReads|TestVarlenModsGraphReplay|TestSequenceAttentionMods|TestWindowOverRingCache|TestDecodeModsWindowReads|TestHeadDimsDecode|TestHeadDimsVarlen/.*_D120_|TestHeadDimsVarlen/.*_D(96|192)_.*e4m3|TestDecodeLayoutsAgree|TestVarlenLayoutsAgree|TestHeadDim120Refused|TestRopeValuesSkipPositionFault|TestDecodeModsMatchReference/.*_e4m3_.*window=37|TestVarlenModsMatchReference/.*_e4m3_.*window=37'
    PAGEDKV_TEST_SEED=${PAGEDKV_TEST_SEED:-7} run memcheck 240 compute-sanitizer --tool memcheck --error-exitcode 9 \
      .gpu/tests.test -test.run "$reduced" -test.timeout 235s
    PAGEDKV_TEST_SEED=${PAGEDKV_TEST_SEED:-7} run racecheck 240 compute-sanitizer --tool racecheck --error-exitcode 9 \
      .gpu/tests.test -test.run 'TestDecodeMatchesReference|TestDecodeRingDepths|TestDecodeWorkspace|TestDecodeFP8Narrow|TestAppendMatchesReference|TestRopeCacheMatchesReference|TestRopeCacheValuesLaunch|TestQKVNormRopeMatchesReference|TestVarlenMatchesReference|TestHeadDimsVarlen/.*_D120_.*bs16|TestDecodeModsMatchReference/.*_e4m3_.*window=37|TestDecodeLayoutsAgree|TestVarlenLayoutsAgree' -test.timeout 235s
    ;;
  esac
done
echo "==== info"; head -40 "$OUT/info.log" 2>/dev/null; grep -E 'modules loaded in' "$OUT/info.log" 2>/dev/null
for f in info-sass info-ptx-cold info-ptx-warm; do
  [ -f "$OUT/$f.log" ] && { echo "==== $f"; grep -E ' ok |FAILED|refused first|modules loaded in' "$OUT/$f.log" | sed -E 's/\[[^]]*\]//; s/  +/ /g'; }
done
for f in tests-sass tests-ptx; do
  [ -f "$OUT/$f.log" ] && { echo "==== $f"; grep -E '^(--- FAIL|FAIL|ok|PASS)' "$OUT/$f.log" | head; }
done
echo "==== tests"; grep -E '^(--- FAIL|FAIL|ok|PASS)|Error Trace|Error:|panic' "$OUT/tests.log" 2>/dev/null | head -40
for t in memcheck racecheck; do
  [ -f "$OUT/$t.log" ] && { echo "==== $t"; grep -E 'ERROR SUMMARY|Error|FAIL|^ok|PASS|RACECHECK SUMMARY' "$OUT/$t.log" | head -12; }
  for f in "$OUT/$t"-*.log; do
    [ -f "$f" ] && { echo "==== $(basename "$f" .log)"; grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^--- FAIL|^FAIL|^ok|^PASS|panic: test timed out' "$f" | head -6; }
  done
done
for f in "$OUT"/ncu-*.log; do
  [ -f "$f" ] && { echo "==== $(basename "$f" .log)"; grep -E '^PROFILE|  (Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Registers Per Thread|Achieved Occupancy|Issue Slots Busy|No Eligible|Warp Cycles Per Issued Instruction|SM Frequency|Elapsed Cycles|SM Active Cycles|L2 Hit Rate|dram__bytes_read.sum|dram__bytes_write.sum|lts__t_sectors_op_read.sum|lts__t_sectors_op_write.sum) ' "$f"; }
done
echo "==== verify"; tail -8 "$OUT/verify.log" 2>/dev/null
echo "==== bench"; sed -n '/^pagedkv bench on/,$p' "$OUT/bench.log" 2>/dev/null; tail -5 "$OUT/bench.log" 2>/dev/null | grep -v '^ ' 
echo "==== summary"; sha256sum .gpu/pagedkv .gpu/tests.test | cut -c1-12,65-; printf '%s\n' "${summary[@]}"
# The device tool returns only a few files from $OUT (the first ones by
# name): PACK=1 (the default) puts every log in logs.tgz, leaving it, the
# bench JSON files and summary.txt.
printf '%s\n' "${summary[@]}" >"$OUT/summary.txt"
if [ "${PACK:-1}" = 1 ]; then
  (
    cd "$OUT" || exit
    files=()
    for f in ./*.log ./*.txt; do
      [ -f "$f" ] && [ "$f" != ./summary.txt ] && files+=("$f")
    done
    [ "${#files[@]}" -gt 0 ] && tar czf logs.tgz "${files[@]}" && rm -f "${files[@]}"
  )
fi
