package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/internal/check"
)

// benchResult is one measured row.
type benchResult struct {
	Op         string  `json:"op"`
	DType      string  `json:"dtype"`
	Shape      string  `json:"shape"`
	Plan       string  `json:"plan,omitempty"`
	Splits     int     `json:"splits,omitempty"`
	Micros     float64 `json:"us"`
	TFLOPS     float64 `json:"tflops,omitempty"` // compute-bound rows (varlen)
	GBps       float64 `json:"gbps"`
	PctCopy    float64 `json:"pct_copy"`
	BestSplits int     `json:"best_splits,omitempty"`
	BestMicros float64 `json:"best_us,omitempty"`
	RegretPct  float64 `json:"regret_pct,omitempty"`
	HostMicros float64 `json:"host_us,omitempty"` // host time to issue one call
	// GraphMicros (cache-op rows) is the device time per call: a CUDA graph
	// of graphCalls calls replayed, so the host's launch rate, which bounds
	// the eager column for small T, drops out.
	GraphMicros float64 `json:"graph_us,omitempty"`
	// BalancedMicros is the same batch with the balanced plan forced
	// (DECODE_BALANCE=1): what a graph of it runs.
	BalancedMicros float64 `json:"balanced_us,omitempty"`
	Sweep          []sweep `json:"sweep,omitempty"`
}

type sweep struct {
	Splits int     `json:"splits"`
	Micros float64 `json:"us"`
}

type benchReport struct {
	Device   string        `json:"device"`
	Driver   int           `json:"driver"`
	Date     string        `json:"date"`
	Build    string        `json:"build"` // buildStamp: the code measured
	CopyGBps float64       `json:"copy_gbps"`
	Results  []benchResult `json:"results"`
}

type bencher struct {
	r      *pagedkv.Runtime
	s      *pagedkv.Stream
	timer  *pagedkv.Timer
	reps   int
	rep    benchReport
	g      *rand.Rand
	arena  *check.Arena
	l2     int64
	status func(string)
	// refused lists the rows the library refused (ErrInvalidArgument):
	// the run goes on without them and fails at the end, after printing
	// and saving what it measured.
	refused []string
	// layouts, when set, also times every uniform decode row of the
	// grid in the x-split and shuffle layouts (-layouts).
	layouts bool
	// shape, when not nil, selects the rows to measure (-shape).
	shape *regexp.Regexp
}

// wants reports whether the row of dtype and shape is measured: every row
// unless -shape selects others. The pattern sees "<dtype> <shape>" as the
// table prints them, e.g. "e4m3 seqs=8 kv=8192".
func (b *bencher) wants(dtype, shape string) bool {
	return b.shape == nil || b.shape.MatchString(dtype+" "+shape)
}

// benchOptions are pagedkv bench's flags, checked.
type benchOptions struct {
	Op       string // all, copy, append, decode or varlen
	JSONPath string // "" for none
	Reps     int
	Quick    bool
	Sweep    bool
	Layouts  bool
	Shape    *regexp.Regexp // nil: every row
	Caches   []pagedkv.DType
	Device   int
}

// benchCaches are the -cache names.
var benchCaches = map[string]pagedkv.DType{"f16": pagedkv.F16, "bf16": pagedkv.BF16, "e4m3": pagedkv.E4M3}

// parseBench parses and checks pagedkv bench's arguments (after "bench")
// without touching a device. Errors are a *usageError or a *helpRequest.
func parseBench(args []string) (benchOptions, error) {
	fs := newFlagSet("bench", "pagedkv bench [all|copy|append|decode|varlen] [flags]")
	op := fs.String("op", "all", "what to measure: all, copy, append (alias cache: every cache-writing op), decode, varlen")
	jsonPath := fs.String("json", "", "also write the results as JSON to this file")
	reps := fs.Int("reps", 15, "timed batches per measurement, 3 or more (the median is reported)")
	quick := fs.Bool("quick", false, "a reduced decode grid (seqs 1 and 32; kv 512 and 8192)")
	noSweep := fs.Bool("nosweep", false, "skip the forced-plan sweep: split counts (decode's regret column, varlen's \"forced\" rows) and, on sm_90, varlen's other tensor-core choice")
	layouts := fs.Bool("layouts", false, "also time the uniform decode rows and the varlen rows in the HND, x-split and shuffle layouts (rows end in the layout's name)")
	caches := fs.String("cache", "f16,bf16,e4m3", "decode and varlen cache dtypes to measure, comma-separated (ragged decode rows come with f16; e4m3 varlen rows with bf16 and f16 queries)")
	device := fs.Int("device", 0, "CUDA device ordinal")
	shape := fs.String("shape", "", "measure only the rows whose \"<dtype> <shape>\" matches this regular expression (e.g. 'e4m3 seqs=8 kv=8192$'; for profilers)")
	// The op may also come first: pagedkv bench decode [flags].
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		*op, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return benchOptions{}, err
	}
	o := benchOptions{Op: *op, JSONPath: *jsonPath, Reps: *reps, Quick: *quick, Sweep: !*noSweep,
		Layouts: *layouts, Device: *device}
	if o.Op == "cache" { // an alias: the cache-writing ops
		o.Op = "append"
	}
	switch o.Op {
	case "all", "copy", "append", "decode", "varlen":
	default:
		return benchOptions{}, usagef("bench", "-op=%q is not allowed; allowed: all, copy, append (or cache), decode, varlen", *op)
	}
	if o.Reps < 3 {
		// Fewer batches leave no median worth the name.
		return benchOptions{}, usagef("bench", "-reps=%d is not allowed; allowed: 3 or more", o.Reps)
	}
	if *shape != "" {
		re, err := regexp.Compile(*shape)
		if err != nil {
			return benchOptions{}, usagef("bench", "-shape=%q is not allowed; allowed: a Go regular expression (%v)", *shape, err)
		}
		o.Shape = re
	}
	seen := map[pagedkv.DType]bool{}
	for _, name := range strings.Split(*caches, ",") {
		d, ok := benchCaches[strings.TrimSpace(name)]
		if !ok || seen[d] {
			return benchOptions{}, usagef("bench", "-cache=%q is not allowed; allowed: a comma-separated list of f16, bf16, e4m3, each at most once", *caches)
		}
		seen[d] = true
		o.Caches = append(o.Caches, d)
	}
	if err := checkDevice("bench", o.Device); err != nil {
		return benchOptions{}, err
	}
	return o, nil
}

// checkOutPath reports, before a run of minutes, whether command could
// write the file its flag (as "-json") names at path: its folder must exist
// and path must not be a folder; "" passes (no file). The file itself is
// written only at the end, so a failed run leaves an earlier one in place.
func checkOutPath(command, flag, path string) error {
	if path == "" {
		return nil
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return usagef(command, "%s=%q is not allowed; allowed: a file path, and this is a folder", flag, path)
	}
	dir := filepath.Dir(path)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return usagef(command, "%s=%q is not allowed; allowed: a file in an existing folder, and %s is not one", flag, path, dir)
	}
	return nil
}

func runBench(args []string) error {
	o, err := parseBench(args)
	if err != nil {
		return err
	}
	if err := checkOutPath("bench", "-json", o.JSONPath); err != nil {
		return err
	}

	r, err := pagedkv.Open(pagedkv.Options{Device: o.Device})
	if err != nil {
		return err
	}
	defer r.Close()
	b := &bencher{r: r, s: r.Stream(), reps: o.Reps, g: rand.New(rand.NewPCG(1, 2)), arena: check.NewArena(r),
		l2: int64(r.Info().L2Bytes), layouts: o.Layouts, shape: o.Shape}
	defer b.arena.Free()
	if b.timer, err = b.s.NewTimer(); err != nil {
		return err
	}
	defer b.timer.Close()
	b.status = func(msg string) { fmt.Fprintf(os.Stderr, "bench: %s\n", msg) }
	b.rep = benchReport{Device: r.Info().Name, Driver: r.Info().DriverVersion, Date: time.Now().UTC().Format("2006-01-02"), Build: buildStamp()}

	// The copy bandwidth is the yardstick of every memory-bound row.
	if b.rep.CopyGBps, err = b.copyBandwidth(); err != nil {
		return err
	}
	// A failing section stops the run, but what was measured before it is
	// still printed and saved.
	runErr := b.sections(o)
	b.print()
	if len(b.refused) > 0 {
		runErr = errors.Join(runErr, fmt.Errorf("bench: %d rows refused: %s", len(b.refused), strings.Join(b.refused, "; ")))
	}
	if o.JSONPath != "" {
		data, err := json.MarshalIndent(b.rep, "", "  ")
		if err == nil {
			err = os.WriteFile(o.JSONPath, append(data, '\n'), 0o644)
		}
		runErr = errors.Join(runErr, err)
	}
	return runErr
}

// sections runs the ops o asks for, in order, up to the first error.
func (b *bencher) sections(o benchOptions) error {
	if o.Op == "all" || o.Op == "append" {
		if err := b.benchAppend(); err != nil {
			return err
		}
		if err := b.benchRope(); err != nil {
			return err
		}
		if err := b.benchQKV(); err != nil {
			return err
		}
	}
	if o.Op == "all" || o.Op == "decode" {
		if err := b.benchDecode(o.Caches, o.Quick, o.Sweep); err != nil {
			return err
		}
	}
	if o.Op == "all" || o.Op == "varlen" {
		if err := b.benchVarlen(o.Caches, o.Sweep); err != nil {
			return err
		}
	}
	return nil
}

// refuse records row, which the library refused with err, and reports
// whether the run may go on without it: only a refusal (ErrInvalidArgument,
// nothing launched) may; any other error stops the run.
func (b *bencher) refuse(row string, err error) bool {
	if !errors.Is(err, pagedkv.ErrInvalidArgument) {
		return false
	}
	b.refused = append(b.refused, row+": "+err.Error())
	b.status(fmt.Sprintf("%s refused: %v", row, err))
	return true
}

// measure times calls of fn (fn(i) is the i-th call, so inputs can rotate)
// with CUDA events: after warm-up, reps batches of k back-to-back calls, k
// chosen so a batch lasts about 300 µs; it returns the median µs per call.
// Each batch is queued behind one untimed call (the lead-in), so the GPU
// is busy when the start event is recorded and the host's time to the
// batch's first launch hides behind it, as it does in an engine that queues
// its step's work ahead: the result is device time per call. Without it a
// batch of one call (every row over 300 µs) would count that host time too.
// scripts/compare/torch_varlen.py measures the same way.
func (b *bencher) measure(fn func(i int) error) (float64, error) {
	call := 0
	next := func() error { call++; return fn(call) }
	for range 3 {
		if err := next(); err != nil {
			return 0, err
		}
	}
	if err := next(); err != nil { // the lead-in
		return 0, err
	}
	if err := b.timer.Start(); err != nil {
		return 0, err
	}
	if err := next(); err != nil {
		return 0, err
	}
	ms, err := b.timer.Stop()
	if err != nil {
		return 0, err
	}
	k := min(max(int(0.3/max(float64(ms), 1e-4)), 1), 64)
	times := make([]float64, 0, b.reps)
	for range b.reps {
		if err := next(); err != nil { // the lead-in
			return 0, err
		}
		if err := b.timer.Start(); err != nil {
			return 0, err
		}
		for range k {
			if err := next(); err != nil {
				return 0, err
			}
		}
		ms, err := b.timer.Stop()
		if err != nil {
			return 0, err
		}
		times = append(times, float64(ms)*1000/float64(k))
	}
	slices.Sort(times)
	return times[len(times)/2], nil
}

// hostTime returns the host's µs per call of fn, issuing 100 calls back to
// back without waiting for the GPU (which runs them meanwhile): when it is
// close to measure's µs per call, the host, not the GPU, sets the pace.
func (b *bencher) hostTime(fn func(i int) error) (float64, error) {
	const calls = 100
	if err := b.s.Synchronize(); err != nil {
		return 0, err
	}
	start := time.Now()
	for i := range calls {
		if err := fn(i); err != nil {
			return 0, err
		}
	}
	elapsed := time.Since(start)
	if err := b.s.Synchronize(); err != nil {
		return 0, err
	}
	return float64(elapsed.Microseconds()) / calls, nil
}

func (b *bencher) copyBandwidth() (float64, error) {
	const bytes = 1 << 30
	src, err := b.arena.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	dst, err := b.arena.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	if err := b.s.Fill(src, 0x3C); err != nil {
		return 0, err
	}
	us, err := b.measure(func(int) error { return b.s.Copy(dst, src) })
	if err != nil {
		return 0, err
	}
	gbps := 2 * bytes / us / 1e3
	b.rep.Results = append(b.rep.Results, benchResult{Op: "copy", Shape: "1 GiB device-to-device", Micros: us, GBps: gbps, PctCopy: 100})
	return gbps, nil
}

// rotations is how many independent input sets keep a working set of bytes
// per call at three times the L2 size, so that repeated calls read DRAM.
func (b *bencher) rotations(bytes int64, most int) int {
	return int(min(max((3*b.l2+bytes-1)/max(bytes, 1), 1), int64(most)))
}

// benchAppend measures the cache append (f16, 8 KV heads, head dim 128,
// block 16) and its inverse gather. The headline rows map the tokens the way
// a prefill does, filling random pages in order (slot = page[t/16]·16 +
// t%16): what the transposing x-split and shuffle path is for. At T=65536,
// extra rows give each token its own random slot (the decode pattern at
// prefill size), which every layout moves token by token.
func (b *bencher) benchAppend() error {
	const kvHeads, headDim, blockSize = 8, 128, 16
	const maxSlots = 65536
	const numBlocks = maxSlots / blockSize
	cacheBytes := int64(maxSlots * kvHeads * headDim * 2)
	kc, err := b.arena.Alloc(cacheBytes)
	if err != nil {
		return err
	}
	vc, err := b.arena.Alloc(cacheBytes)
	if err != nil {
		return err
	}
	for _, tokens := range []int{1, 64, 4096, 65536} {
		b.status(fmt.Sprintf("append f16 T=%d", tokens))
		elems := tokens * kvHeads * headDim
		bytes := int64(4*elems*2 + 8*tokens) // K, V read; K, V written; slots read
		pagesPerSet := (tokens + blockSize - 1) / blockSize
		rot := min(b.rotations(bytes, 16), numBlocks/pagesPerSet)
		pages := b.g.Perm(numBlocks)
		sets := make([]pagedkv.AppendArgs, rot)
		for i := range sets {
			kRaw, _ := check.RandomTensor(b.g, pagedkv.F16, elems, 1)
			vRaw, _ := check.RandomTensor(b.g, pagedkv.F16, elems, 1)
			own := pages[i*pagesPerSet:]
			slots := make([]int64, tokens)
			for t := range slots {
				slots[t] = int64(own[t/blockSize]*blockSize + t%blockSize)
			}
			a := pagedkv.AppendArgs{KCache: kc, VCache: vc, NumTokens: tokens, NumKVHeads: kvHeads, HeadDim: headDim,
				BlockSize: blockSize, NumBlocks: numBlocks, DType: pagedkv.F16, CacheDType: pagedkv.F16}
			if a.K, err = check.Upload(b.arena, b.s, kRaw, 1); err != nil {
				return err
			}
			if a.V, err = check.Upload(b.arena, b.s, vRaw, 1); err != nil {
				return err
			}
			if a.SlotMapping, err = check.Upload(b.arena, b.s, slots, 8); err != nil {
				return err
			}
			a.HostSlotMapping = hostSlots(slots) // an engine has them (AppendArgs.HostSlotMapping)
			sets[i] = a
		}
		shape := fmt.Sprintf("T=%d KH=%d D=%d bs=%d", tokens, kvHeads, headDim, blockSize)
		layouts := allLayouts[:1]
		if tokens == 65536 {
			layouts = allLayouts
		}
		if err := b.appendRows(shape, "prefill slots", bytes, sets, layouts); err != nil {
			return err
		}
		// The same tokens into an fp8 e4m3 cache (flash): 16-bit K and V
		// read, one byte per element written.
		fp8 := slices.Clone(sets)
		for i := range fp8 {
			fp8[i].CacheDType, fp8[i].KScale, fp8[i].VScale = pagedkv.E4M3, 1, 1
		}
		if err := b.appendRows(shape, "prefill slots e4m3", int64(2*elems*2+2*elems+8*tokens), fp8, allLayouts[:1]); err != nil {
			return err
		}
		if tokens != 65536 {
			continue
		}
		gather := pagedkv.GatherArgs{KCache: kc, VCache: vc, SlotMapping: sets[0].SlotMapping, KOut: sets[0].K, VOut: sets[0].V,
			NumTokens: tokens, NumKVHeads: kvHeads, HeadDim: headDim, BlockSize: blockSize, NumBlocks: numBlocks,
			CacheDType: pagedkv.F16, Layout: pagedkv.LayoutShuffle}
		if err := b.gatherRow(shape, "prefill slots", bytes, &gather); err != nil {
			return err
		}
		// The same inputs with one random slot per token.
		random := make([]int64, tokens)
		for t, slot := range b.g.Perm(maxSlots)[:tokens] {
			random[t] = int64(slot)
		}
		randomSets := slices.Clone(sets)
		for i := range randomSets {
			if randomSets[i].SlotMapping, err = check.Upload(b.arena, b.s, random, 8); err != nil {
				return err
			}
			randomSets[i].HostSlotMapping = hostSlots(random)
		}
		if err := b.appendRows(shape, "random slots", bytes, randomSets, allLayouts); err != nil {
			return err
		}
		gather.SlotMapping = randomSets[0].SlotMapping
		if err := b.gatherRow(shape, "random slots", bytes, &gather); err != nil {
			return err
		}
	}
	return nil
}

// appendRows measures one append row per layout, rotating through sets.
func (b *bencher) appendRows(shape, slots string, bytes int64, sets []pagedkv.AppendArgs, layouts []pagedkv.CacheLayout) error {
	for _, layout := range layouts {
		for i := range sets {
			sets[i].Layout = layout
		}
		call := 0
		err := b.row(fmt.Sprintf("%s %s %s", shape, layout, slots), float64(bytes),
			func() error { call++; return b.r.Append(b.s, &sets[call%len(sets)]) })
		if err != nil {
			return err
		}
		// Where the planner would take the page path without the host's
		// slots (dispatch.AppendPagesMinCover), the other path beside it, for
		// the comparison behind the rule: the page path when the host's slots
		// keep the token path (a prefill's), else the token path.
		bare := slices.Clone(sets)
		for i := range bare {
			bare[i].HostSlotMapping = nil
		}
		pages, err := b.r.PlanAppend(&bare[0])
		if err != nil {
			return err
		}
		if pages.Claim == "" {
			continue
		}
		if plan, err := b.r.PlanAppend(&sets[0]); err != nil {
			return err
		} else if plan.Claim == "" {
			err = b.row(fmt.Sprintf("%s %s %s, page path (no host slots)", shape, layout, slots), float64(bytes),
				func() error { call++; return b.r.Append(b.s, &bare[call%len(bare)]) })
			if err != nil {
				return err
			}
			continue
		}
		tokenPlan, err := b.r.PlanAppendWith(&sets[0], dispatch.AppendPathTokens)
		if err != nil {
			return err
		}
		err = b.row(fmt.Sprintf("%s %s %s, token path", shape, layout, slots), float64(bytes),
			func() error { call++; return b.r.AppendWithPlan(b.s, &sets[call%len(sets)], tokenPlan) })
		if err != nil {
			return err
		}
	}
	return nil
}

// gatherRow measures gathering g's slots back to token rows (the bytes of
// the matching append).
func (b *bencher) gatherRow(shape, slots string, bytes int64, g *pagedkv.GatherArgs) error {
	return b.row(fmt.Sprintf("gather %s %s %s", shape, g.Layout, slots), float64(bytes),
		func() error { return b.r.Gather(b.s, g) })
}

// benchRope measures the fused RoPE + cache write (32 q / 8 KV heads, head
// dim 128, NeoX, half-width table, f16 cache; random slots in the flash
// layout, and at T = 65536 a prefill's slots in every layout): bytes are q,
// k, v read plus q_out, k_out and both cache rows written.
func (b *bencher) benchRope() error {
	const qHeads, kvHeads, headDim, blockSize, maxPos = 32, 8, 128, 16, 4096
	for _, tokens := range []int{1, 64, 4096, 65536} {
		b.status(fmt.Sprintf("rope+cache f16 T=%d", tokens))
		a := check.NewArena(b.r)
		args := pagedkv.RopeCacheArgs{NumTokens: tokens, NumQHeads: qHeads, NumKVHeads: kvHeads, HeadDim: headDim,
			BlockSize: blockSize, NumBlocks: tokens/blockSize + 1, MaxPos: maxPos, RotDim: headDim / 2, NeoX: true,
			DType: pagedkv.F16, CacheDType: pagedkv.F16}
		qRaw, _ := check.RandomTensor(b.g, pagedkv.F16, tokens*qHeads*headDim, 1)
		kRaw, _ := check.RandomTensor(b.g, pagedkv.F16, tokens*kvHeads*headDim, 1)
		cosSin := make([]float32, maxPos*headDim)
		for i := range cosSin {
			cosSin[i] = float32(2*b.g.Float64() - 1)
		}
		positions := make([]int64, tokens)
		slots := make([]int64, tokens)
		for i, p := range b.g.Perm(args.NumBlocks * blockSize)[:tokens] {
			positions[i], slots[i] = int64(b.g.IntN(maxPos)), int64(p)
		}
		var set check.Setter
		cacheBytes := int64(args.NumBlocks * blockSize * kvHeads * headDim * 2)
		set.To(&args.Q)(check.Upload(a, b.s, qRaw, 1))
		set.To(&args.K)(check.Upload(a, b.s, kRaw, 1))
		set.To(&args.V)(check.Upload(a, b.s, kRaw, 1))
		set.To(&args.QOut)(a.Alloc(int64(len(qRaw))))
		set.To(&args.KOut)(a.Alloc(int64(len(kRaw))))
		set.To(&args.KCache)(a.Alloc(cacheBytes))
		set.To(&args.VCache)(a.Alloc(cacheBytes))
		set.To(&args.Positions)(check.Upload(a, b.s, positions, 8))
		set.To(&args.SlotMapping)(check.Upload(a, b.s, slots, 8))
		set.To(&args.CosSin)(check.Upload(a, b.s, cosSin, 4))
		err := set.Err
		bytes := float64(2*len(qRaw) + 5*len(kRaw)) // q in and out; k, v in; k_out and both cache rows out
		if err == nil {
			err = b.row(fmt.Sprintf("rope+cache T=%d QH=%d KH=%d D=%d bs=%d flash", tokens, qHeads, kvHeads, headDim, blockSize),
				bytes, func() error { return b.r.RopeCache(b.s, &args) })
		}
		// At T = 65536, a prefill's slots (consecutive positions through
		// shuffled pages) in every layout: V into the x-split and shuffle
		// layouts by its own launch in page runs.
		if tokens == 65536 {
			prefill := make([]int64, tokens)
			for i, page := range b.g.Perm(args.NumBlocks)[:tokens/blockSize] {
				for o := range blockSize {
					prefill[i*blockSize+o] = int64(page*blockSize + o)
				}
			}
			set.To(&args.SlotMapping)(check.Upload(a, b.s, prefill, 8))
			err = set.Err
			for _, layout := range allLayouts {
				if err != nil {
					break
				}
				args.Layout = layout
				err = b.row(fmt.Sprintf("rope+cache T=%d QH=%d KH=%d D=%d bs=%d %s prefill slots", tokens, qHeads, kvHeads, headDim, blockSize, layout),
					bytes, func() error { return b.r.RopeCache(b.s, &args) })
			}
		}
		if ferr := a.Free(); err == nil {
			err = ferr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// graphCalls is how many calls a cache-op row's graph holds.
const graphCalls = 32

// row measures fn and records it as a cache-op row moving bytes per call:
// eager back-to-back calls, and a graph of graphCalls calls replayed.
func (b *bencher) row(shape string, bytes float64, fn func() error) error {
	if !b.wants("f16", shape) {
		return nil
	}
	us, err := b.measure(func(int) error { return fn() })
	if err != nil {
		return err
	}
	g, err := b.captureGraph(func() error {
		for range graphCalls {
			if err := fn(); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s as a graph: %w", shape, err)
	}
	defer g.Close()
	graphUs, err := b.measure(func(int) error { return g.Launch(b.s) })
	if err != nil {
		return err
	}
	gbps := bytes / us / 1e3
	b.rep.Results = append(b.rep.Results, benchResult{Op: "append", DType: "f16", Shape: shape,
		Micros: us, GBps: gbps, PctCopy: 100 * gbps / b.rep.CopyGBps, GraphMicros: graphUs / graphCalls})
	return nil
}

// allLayouts are the cache layouts the cache-op rows measure, flash first.
var allLayouts = []pagedkv.CacheLayout{pagedkv.LayoutFlash, pagedkv.LayoutXSplit, pagedkv.LayoutShuffle, pagedkv.LayoutHND}

// benchQKV measures split QKV + RMSNorm + RoPE + cache write (32 q / 8 KV
// heads, head dim 128, NeoX, half-width tables, one sequence, f16 cache in
// the flash layout, and in every layout at T = 65536): bytes are the QKV
// rows and the tokens' cos and sin rows read (one sequence, so every token
// has its own position and rows: 2·64 floats, 2% of the total) plus q_out
// and both cache rows written.
func (b *bencher) benchQKV() error {
	const qHeads, kvHeads, headDim, blockSize = 32, 8, 128, 16
	for _, tokens := range []int{1, 64, 4096, 65536} {
		b.status(fmt.Sprintf("qkv+norm+rope f16 T=%d", tokens))
		a := check.NewArena(b.r)
		maxBlocks := tokens/blockSize + 1
		args := pagedkv.QKVNormRopeArgs{NumTokens: tokens, NumSeqs: 1, NumQHeads: qHeads, NumKVHeads: kvHeads, HeadDim: headDim,
			BlockSize: blockSize, NumBlocks: maxBlocks, MaxBlocksPerSeq: maxBlocks, MaxPos: tokens, RotDim: headDim / 2, NeoX: true,
			Norm: pagedkv.NormQK, Eps: 1e-6, DType: pagedkv.F16, CacheDType: pagedkv.F16}
		width := (qHeads + 2*kvHeads) * headDim
		qkvRaw, _ := check.RandomTensor(b.g, pagedkv.F16, tokens*width, 1)
		wRaw, _ := check.RandomTensor(b.g, pagedkv.F16, headDim, 1)
		table := make([]float32, tokens*headDim) // MaxPos rows of RotDim cosines and RotDim sines
		for i := range table {
			table[i] = float32(2*b.g.Float64() - 1)
		}
		tables := make([]int32, maxBlocks)
		for i, p := range b.g.Perm(maxBlocks) {
			tables[i] = int32(p)
		}
		var set check.Setter
		cacheBytes := int64(maxBlocks * blockSize * kvHeads * headDim * 2)
		set.To(&args.QKV)(check.Upload(a, b.s, qkvRaw, 1))
		set.To(&args.QOut)(a.Alloc(int64(tokens * qHeads * headDim * 2)))
		set.To(&args.KCache)(a.Alloc(cacheBytes))
		set.To(&args.VCache)(a.Alloc(cacheBytes))
		set.To(&args.BlockTables)(check.Upload(a, b.s, tables, 4))
		set.To(&args.PosOffsets)(check.Upload(a, b.s, []int32{0}, 4))
		set.To(&args.CosSin)(check.Upload(a, b.s, table, 4))
		set.To(&args.QNormWeight)(check.Upload(a, b.s, wRaw, 1))
		set.To(&args.KNormWeight)(check.Upload(a, b.s, wRaw, 1))
		err := set.Err
		// Every layout at T = 65536 (the x-split and shuffle layouts write V
		// element by element), the flash layout at every T.
		layouts := allLayouts[:1]
		if tokens == 65536 {
			layouts = allLayouts
		}
		for _, layout := range layouts {
			if err != nil {
				break
			}
			args.Layout = layout
			err = b.row(fmt.Sprintf("qkv+norm+rope T=%d QH=%d KH=%d D=%d bs=%d %s", tokens, qHeads, kvHeads, headDim, blockSize, layout),
				float64(tokens*headDim*2*(qHeads+2*kvHeads+qHeads+2*kvHeads)+tokens*2*args.RotDim*4), func() error { return b.r.QKVNormRope(b.s, &args) })
		}
		if ferr := a.Free(); err == nil {
			err = ferr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// pagePool is a pair of K/V page pools (benchKVHeads heads of benchHeadDim,
// benchBlockSize tokens a page, room for 2-byte elements) that the attention
// benches fill with random data of one cache dtype (fillPool).
type pagePool struct {
	k, v   pagedkv.Buffer
	blocks int
}

// newPagePool allocates a pool of blocks pages on arena.
func newPagePool(arena *check.Arena, blocks int) (*pagePool, error) {
	pageBytes := int64(benchBlockSize * benchKVHeads * benchHeadDim * 2)
	pool := &pagePool{blocks: blocks}
	var err error
	if pool.k, err = arena.Alloc(int64(blocks) * pageBytes); err != nil {
		return nil, err
	}
	if pool.v, err = arena.Alloc(int64(blocks) * pageBytes); err != nil {
		return nil, err
	}
	return pool, nil
}

// fillPool fills both halves of pool with random values of cache dtype d.
func (b *bencher) fillPool(pool *pagePool, d pagedkv.DType) error {
	b.status(fmt.Sprintf("filling %.1f GB of %s pages with random data", 2*float64(pool.k.Bytes)/1e9, d))
	if err := b.fillRandom(pool.k, d); err != nil {
		return err
	}
	return b.fillRandom(pool.v, d)
}

// pagesOf is how many pages sequences of these lengths use.
func pagesOf(lens []int32) int {
	n := 0
	for _, l := range lens {
		n += (int(l) + benchBlockSize - 1) / benchBlockSize
	}
	return n
}

// pageTables returns sets block tables of len(lens)·pagesPerSeq entries in
// which each sequence owns the pages its length needs, taken in order from
// perm (a shuffled permutation of the pool's pages), so no two sequences or
// sets share a page: set i reads its own random pages of the pool. Entries
// past a sequence's length stay 0 and are never read.
func pageTables(perm []int, lens []int32, pagesPerSeq, sets int) [][]int32 {
	tables := make([][]int32, sets)
	next := 0
	for i := range tables {
		table := make([]int32, len(lens)*pagesPerSeq)
		for sq, l := range lens {
			for j := range (int(l) + benchBlockSize - 1) / benchBlockSize {
				table[sq*pagesPerSeq+j] = int32(perm[next])
				next++
			}
		}
		tables[i] = table
	}
	return tables
}

func (b *bencher) fillRandom(dst pagedkv.Buffer, d pagedkv.DType) error {
	// A 64 MiB random chunk, uploaded once and copied across the pool.
	const chunk = 64 << 20
	raw, _ := check.RandomTensor(b.g, d, chunk/d.Size(), 1)
	first, err := dst.Slice(0, min(chunk, dst.Bytes))
	if err != nil {
		return err
	}
	if err := pagedkv.Upload(b.s, first, raw[:first.Bytes]); err != nil {
		return err
	}
	for off := first.Bytes; off < dst.Bytes; off += chunk {
		n := min(chunk, dst.Bytes-off)
		to, _ := dst.Slice(off, n)
		from, _ := first.Slice(0, n)
		if err := b.s.Copy(to, from); err != nil {
			return err
		}
	}
	return b.s.Synchronize()
}

func (b *bencher) benchDecode(caches []pagedkv.DType, quick, doSweep bool) error {
	const qHeads, kvHeads, headDim, blockSize = 32, 8, 128, 16
	seqsGrid := []int{1, 8, 32, 128}
	kvGrid := []int{512, 2048, 8192, 32768}
	fullSeqs, fullKV := seqsGrid, kvGrid
	if quick {
		seqsGrid, kvGrid = []int{1, 32}, []int{512, 8192}
	}
	const limit = 40e9 // skip shapes with more K+V than this
	// The pool holds the full grid's largest shape even with -quick: the
	// rows -quick keeps (windows, other head dims) need that many pages.
	maxPages := 0
	for _, s := range fullSeqs {
		for _, kv := range fullKV {
			if float64(s*kv*kvHeads*headDim*4) <= limit {
				maxPages = max(maxPages, s*kv/blockSize)
			}
		}
	}
	pool, err := newPagePool(b.arena, maxPages)
	if err != nil {
		return err
	}
	ragged := raggedCases()
	total := len(caches)*len(seqsGrid)*len(kvGrid) + 2*len(ragged)
	n := 0
	for _, cache := range caches {
		if err := b.fillPool(pool, cache); err != nil {
			return err
		}
		q := cache
		if cache == pagedkv.E4M3 {
			q = pagedkv.F16
		}
		for _, seqs := range seqsGrid {
			for _, kv := range kvGrid {
				n++
				// fp8 rows sweep forced splits where the split count decides
				// (up to 8 sequences: long contexts over few blocks).
				c := decodeCase{q: q, cache: cache, lens: uniformLens(seqs, kv), shape: fmt.Sprintf("seqs=%d kv=%d", seqs, kv),
					hostLens: true, sweep: doSweep && (cache != pagedkv.E4M3 || seqs <= 8), balancedAB: cache != pagedkv.E4M3}
				if float64(c.kvBytes()) > limit {
					b.status(fmt.Sprintf("skip %s seqs=%d kv=%d: %.0f GB of KV", cache, seqs, kv, float64(c.kvBytes())/1e9))
					continue
				}
				// The row in each layout -layouts asks for, each as -shape
				// selects it.
				cases := []decodeCase{c}
				if b.layouts {
					for _, layout := range allLayouts[1:] {
						cases = append(cases, decodeCase{q: q, cache: cache, lens: c.lens, shape: c.shape + " " + layout.String(), layout: layout,
							hostLens: c.hostLens})
					}
				}
				for _, lc := range cases {
					if err := b.decodeRow(pool, lc, fmt.Sprintf(" (%d/%d)", n, total)); err != nil {
						return err
					}
				}
			}
		}
		if cache == pagedkv.BF16 {
			continue
		}
		// Score modifiers, over f16 and e4m3 caches: a 4096-token window
		// over 32768-token sequences (against the plain kv=4096 rows: a
		// window reads only its pages), and soft-cap, sinks and ALiBi
		// (against the plain rows of the grid above).
		for _, mc := range []decodeCase{
			{shape: "seqs=8 kv=4096", lens: uniformLens(8, 4096)},
			{shape: "seqs=32 kv=4096", lens: uniformLens(32, 4096)},
			{shape: "seqs=8 kv=32768 window=4096", lens: uniformLens(8, 32768), mods: benchMods{window: 4096}},
			{shape: "seqs=32 kv=32768 window=4096", lens: uniformLens(32, 32768), mods: benchMods{window: 4096}},
			{shape: "seqs=8 kv=8192 softcap=30", lens: uniformLens(8, 8192), mods: benchMods{softCap: 30}},
			{shape: "seqs=8 kv=8192 sinks", lens: uniformLens(8, 8192), mods: benchMods{sinks: true}},
			{shape: "seqs=8 kv=8192 alibi", lens: uniformLens(8, 8192), mods: benchMods{alibi: true}},
			{shape: "seqs=32 kv=8192 softcap+sinks+alibi", lens: uniformLens(32, 8192), mods: benchMods{softCap: 30, sinks: true, alibi: true}},
		} {
			mc.q, mc.cache, mc.hostLens = q, cache, true
			if err := b.decodeRow(pool, mc, ""); err != nil {
				return err
			}
		}
		if cache == pagedkv.E4M3 {
			// The head dims between the powers of two that fp8 caches
			// take, against the grid's seqs=32 kv=8192 row.
			for _, d := range []int{96, 192} {
				hc := decodeCase{q: q, cache: cache, lens: uniformLens(32, 8192), shape: fmt.Sprintf("seqs=32 kv=8192 hd=%d", d), hostLens: true, headDim: d}
				if err := b.decodeRow(pool, hc, ""); err != nil {
					return err
				}
			}
		}
		if cache != pagedkv.F16 {
			continue
		}
		// Small batches captured into graphs (planned balanced: the graph
		// does not know its lengths), against their eager rows above.
		for _, sk := range [][2]int{{1, 512}, {8, 2048}, {32, 8192}} {
			c := decodeCase{q: q, cache: cache, lens: uniformLens(sk[0], sk[1]), shape: fmt.Sprintf("seqs=%d kv=%d graph", sk[0], sk[1]), graph: true}
			if err := b.decodeRow(pool, c, ""); err != nil {
				return err
			}
		}
		// A uniform batch without host lengths: planned balanced as a
		// graph is (the plan cannot tell it from a ragged one), against
		// the grid's row, which passes them.
		noLens := decodeCase{q: q, cache: cache, lens: uniformLens(32, 8192), shape: "seqs=32 kv=8192, no host lens"}
		if err := b.decodeRow(pool, noLens, ""); err != nil {
			return err
		}
		// The head dims between the powers of two, against the grid's
		// seqs=32 kv=8192 row (head dim 128).
		for _, d := range []int{80, 96, 112, 120, 192} {
			hc := decodeCase{q: q, cache: cache, lens: uniformLens(32, 8192), shape: fmt.Sprintf("seqs=32 kv=8192 hd=%d", d), hostLens: true, headDim: d, sweep: doSweep}
			if err := b.decodeRow(pool, hc, ""); err != nil {
				return err
			}
			if b.layouts {
				// In the HND layout a head's rows of a page are contiguous:
				// no 128-byte line holds two heads' rows but at page edges.
				hnd := decodeCase{q: q, cache: cache, lens: hc.lens, shape: hc.shape + " " + pagedkv.LayoutHND.String(), hostLens: true, headDim: d, layout: pagedkv.LayoutHND}
				if err := b.decodeRow(pool, hnd, ""); err != nil {
					return err
				}
			}
		}
		// GQA group 16 (64 query / 4 KV heads), where few (sequence, KV
		// head) items meet the cluster plan's one-wave rule.
		g16 := decodeCase{q: q, cache: cache, lens: uniformLens(8, 8192), shape: "seqs=8 kv=8192 64/4 heads", qHeads: 64, kvHeads: 4, sweep: doSweep}
		if err := b.decodeRow(pool, g16, ""); err != nil {
			return err
		}
		// Ragged batches, f16: eager without the host's lengths (the plan
		// sees only MaxKVLen), eager with them, and graph replays.
		for _, rc := range ragged {
			for _, mode := range []struct {
				suffix         string
				host, graph    bool
				countsTowardsN bool
			}{{" eager, no host lens", false, false, false}, {" eager", true, false, true}, {" graph", false, true, true}} {
				if mode.countsTowardsN {
					n++
				}
				c := decodeCase{q: q, cache: cache, lens: rc.lens, shape: rc.name + mode.suffix, hostLens: mode.host, graph: mode.graph}
				if err := b.decodeRow(pool, c, fmt.Sprintf(" (%d/%d)", n, total)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// raggedCase is a named batch of kv lengths.
type raggedCase struct {
	name string
	lens []int32
}

// raggedCases are ragged serving batches: one long request among
// short ones, first and last, and 64 lengths drawn in 1..4000 (fixed seed).
func raggedCases() []raggedCase {
	longFirst := uniformLens(128, 512)
	longFirst[0] = 32768
	longLast := uniformLens(128, 512)
	longLast[127] = 32768
	g := rand.New(rand.NewPCG(11, 4000))
	random := make([]int32, 64)
	for i := range random {
		random[i] = int32(1 + g.IntN(4000))
	}
	return []raggedCase{
		{"1x32768+127x512", longFirst},
		{"127x512+1x32768", longLast},
		{"64 x rand(1..4000)", random},
	}
}

func uniformLens(seqs, kv int) []int32 {
	lens := make([]int32, seqs)
	for i := range lens {
		lens[i] = int32(kv)
	}
	return lens
}

// decodeCase is one decode row: q and cache dtypes, the batch's lengths, and
// how it is issued.
type decodeCase struct {
	q, cache pagedkv.DType
	lens     []int32
	shape    string
	hostLens bool // pass HostKVLens (eager)
	graph    bool // capture one graph per input set and time the replays
	sweep    bool // also time forced split counts (regret column)
	// balancedAB also times the balanced plan (DECODE_BALANCE=1), what a
	// graph of this batch runs.
	balancedAB bool
	// qHeads and kvHeads: the row's heads (0: 32 and benchKVHeads); kvHeads
	// divides benchKVHeads, so the pool's pages hold whole pages of it.
	qHeads, kvHeads int
	layout          pagedkv.CacheLayout // the caches' layout (the pool's random pages read as it)
	mods            benchMods           // score modifiers (none by default)
	headDim         int                 // 0: benchHeadDim
}

// hd returns the row's head dim.
func (c *decodeCase) hd() int { return cmp.Or(c.headDim, benchHeadDim) }

// benchMods are a decode or varlen row's score modifiers: a sliding window, a
// soft-cap, and random sinks and ALiBi slopes.
type benchMods struct {
	window       int
	softCap      float32
	sinks, alibi bool
}

// modBuffers uploads m's sinks (N(0, 0.5) logits) and ALiBi slopes (the
// ALiBi paper's 2^(−8(h+1)/heads)) for qHeads heads into a, where m asks
// for them.
func (b *bencher) modBuffers(a *check.Arena, m benchMods, qHeads int) (sinks, alibi pagedkv.Buffer, err error) {
	if m.sinks {
		v := make([]float32, qHeads)
		for i := range v {
			v[i] = float32(0.5 * b.g.NormFloat64())
		}
		if sinks, err = check.Upload(a, b.s, v, 4); err != nil {
			return sinks, alibi, err
		}
	}
	if m.alibi {
		v := make([]float32, qHeads)
		for i := range v {
			v[i] = float32(math.Pow(2, -8*float64(i+1)/float64(qHeads)))
		}
		alibi, err = check.Upload(a, b.s, v, 4)
	}
	return sinks, alibi, err
}

const benchKVHeads, benchHeadDim, benchBlockSize = 8, 128, 16

// kvBytes is the K and V the batch reads (with a window, the window's).
func (c *decodeCase) kvBytes() int64 {
	_, kvHeads := c.heads()
	lens := c.lens
	if w := c.mods.window; w > 0 {
		lens = make([]int32, len(c.lens))
		for i, l := range c.lens {
			lens[i] = min(l, int32(w))
		}
	}
	return kvBytes(lens, c.cache) * int64(kvHeads) * int64(c.hd()) / (benchKVHeads * benchHeadDim)
}

// heads returns the row's query and KV heads: 32 and benchKVHeads unless
// the case names others.
func (c *decodeCase) heads() (q, kv int) {
	if c.kvHeads == 0 {
		return 32, benchKVHeads
	}
	return c.qHeads, c.kvHeads
}

// kvBytes is the K and V of sequences of these kv lengths in a cache of
// dtype cache: each sequence's keys and values once per KV head.
func kvBytes(lens []int32, cache pagedkv.DType) int64 {
	var tokens int64
	for _, l := range lens {
		tokens += int64(l)
	}
	return tokens * benchKVHeads * benchHeadDim * 2 * int64(cache.Size())
}

// decodeRow measures c when -shape selects it and adds its row; progress
// follows the row's name in the status line.
func (b *bencher) decodeRow(pool *pagePool, c decodeCase, progress string) error {
	if !b.wants(c.cache.String(), c.shape) {
		return nil
	}
	b.status(fmt.Sprintf("decode %s %s%s", c.cache, c.shape, progress))
	res, err := b.decodeShape(pool, c)
	if err != nil {
		if b.refuse(fmt.Sprintf("decode %s %s", c.cache, c.shape), err) {
			return nil
		}
		return err
	}
	b.rep.Results = append(b.rep.Results, res)
	return nil
}

func (b *bencher) decodeShape(pool *pagePool, c decodeCase) (benchResult, error) {
	const blockSize = benchBlockSize
	headDim := c.hd()
	qHeads, kvHeads := c.heads()
	// Fewer KV heads or a smaller head dim make smaller pages: the pool
	// holds more of them.
	blocks := pool.blocks * benchKVHeads * benchHeadDim / (kvHeads * headDim)
	seqs := len(c.lens)
	maxLen := int(slices.Max(c.lens))
	pagesPerSeq := (maxLen + blockSize - 1) / blockSize
	kvBytes := c.kvBytes()
	pagesUsed := pagesOf(c.lens)
	rot := min(b.rotations(kvBytes, 64), blocks/pagesUsed)
	if rot < 1 {
		return benchResult{}, fmt.Errorf("decode %s needs %d pages; the bench's pool holds %d of them", c.shape, pagesUsed, blocks)
	}
	a := check.NewArena(b.r)
	defer a.Free()
	qRaw, _ := check.RandomTensor(b.g, c.q, seqs*qHeads*headDim, 1)
	base := pagedkv.DecodeArgs{
		KCache: pool.k, VCache: pool.v,
		NumSeqs: seqs, NumQHeads: qHeads, NumKVHeads: kvHeads, HeadDim: headDim, BlockSize: blockSize,
		NumBlocks: blocks, MaxBlocksPerSeq: pagesPerSeq, MaxKVLen: maxLen, DType: c.q, CacheDType: c.cache,
		KVCapacity: pagesPerSeq * blockSize, Layout: c.layout,
	}
	if c.cache == pagedkv.E4M3 {
		base.KScale, base.VScale = 0.05, 0.05
	}
	if c.hostLens {
		base.HostKVLens = c.lens
	}
	var err error
	base.SlidingWindow, base.SoftCap = c.mods.window, c.mods.softCap
	if base.Sinks, base.AlibiSlopes, err = b.modBuffers(a, c.mods, qHeads); err != nil {
		return benchResult{}, err
	}
	if base.Q, err = check.Upload(a, b.s, qRaw, 1); err != nil {
		return benchResult{}, err
	}
	if base.KVLens, err = check.Upload(a, b.s, c.lens, 4); err != nil {
		return benchResult{}, err
	}
	if base.Out, err = a.Alloc(int64(seqs * qHeads * headDim * c.q.Size())); err != nil {
		return benchResult{}, err
	}
	// Each rotation reads its own random pages of the pool (entries past a
	// sequence's length are never read).
	sets := make([]pagedkv.DecodeArgs, rot)
	for i, table := range pageTables(b.g.Perm(blocks), c.lens, pagesPerSeq, rot) {
		sets[i] = base
		if sets[i].BlockTables, err = check.Upload(a, b.s, table, 4); err != nil {
			return benchResult{}, err
		}
	}
	var plan dispatch.DecodePlan
	if c.graph {
		plan, err = b.r.PlanDecodeGraph(&sets[0])
	} else {
		plan, err = b.r.PlanDecode(b.s, &sets[0])
	}
	if err != nil {
		return benchResult{}, err
	}
	decode := func(i int) error { return b.r.Decode(b.s, &sets[i%rot]) }
	if c.graph {
		graphs, err := b.captureEach(len(sets), func(i int) error { return b.r.ReserveDecode(b.s, &sets[i]) }, decode)
		if err != nil {
			return benchResult{}, err
		}
		defer closeGraphs(graphs)
		decode = func(i int) error { return graphs[i%rot].Launch(b.s) }
	}
	us, err := b.measure(decode)
	if err != nil {
		return benchResult{}, err
	}
	host, err := b.hostTime(decode)
	if err != nil {
		return benchResult{}, err
	}
	gbps := float64(kvBytes) / us / 1e3
	res := benchResult{Op: "decode", DType: c.cache.String(), Shape: c.shape,
		Plan: planText(plan), Splits: plan.Splits, Micros: us, GBps: gbps, PctCopy: 100 * gbps / b.rep.CopyGBps, HostMicros: host}
	if c.balancedAB {
		k := b.knobs()
		k.Balance = dispatch.SplitOn
		bp, err := b.r.PlanDecodeWith(&sets[0], k)
		if err != nil {
			return res, err
		}
		if res.BalancedMicros, err = b.measure(func(i int) error { return b.r.DecodeWithPlan(b.s, &sets[i%rot], bp) }); err != nil {
			return res, err
		}
	}
	if !c.sweep {
		return res, nil
	}
	tried := map[int]bool{}
	for _, forced := range []int{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128} {
		k := b.knobs()
		k.ForcedSplits = forced
		fp, err := b.r.PlanDecodeWith(&sets[0], k)
		if err != nil {
			return res, err
		}
		if tried[fp.Splits] {
			continue
		}
		tried[fp.Splits] = true
		fus, err := b.measure(func(i int) error { return b.r.DecodeWithPlan(b.s, &sets[i%rot], fp) })
		if err != nil {
			return res, err
		}
		res.Sweep = append(res.Sweep, sweep{Splits: fp.Splits, Micros: fus})
		if res.BestMicros == 0 || fus < res.BestMicros {
			res.BestMicros, res.BestSplits = fus, fp.Splits
		}
	}
	res.RegretPct = 100 * (us/res.BestMicros - 1)
	return res, nil
}

// knobs are the runtime's decode knobs, so forced plans differ from the
// automatic one only where asked.
func (b *bencher) knobs() dispatch.Knobs { return b.r.DecodeKnobs() }

// captureEach records one graph of op(i) per input set i < n, after
// reserve(i) sized the stream's scratch for it, as an engine captures its
// graphs (each op planned for its KVCapacity). On an error it closes what
// it captured.
func (b *bencher) captureEach(n int, reserve, op func(i int) error) ([]*pagedkv.Graph, error) {
	graphs := make([]*pagedkv.Graph, 0, n)
	for i := range n {
		err := reserve(i)
		var g *pagedkv.Graph
		if err == nil {
			g, err = b.captureGraph(func() error { return op(i) })
		}
		if err != nil {
			closeGraphs(graphs)
			return nil, err
		}
		graphs = append(graphs, g)
	}
	return graphs, nil
}

// closeGraphs closes every graph of graphs.
func closeGraphs(graphs []*pagedkv.Graph) {
	for _, g := range graphs {
		g.Close()
	}
}

// captureGraph records what fn issues on the bench's stream as a graph; on
// an error nothing is left captured or open.
func (b *bencher) captureGraph(fn func() error) (*pagedkv.Graph, error) {
	if err := b.s.BeginCapture(); err != nil {
		return nil, err
	}
	err := fn()
	g, endErr := b.s.EndCapture()
	if err != nil || endErr != nil {
		if g != nil {
			g.Close()
		}
		return nil, errors.Join(err, endErr)
	}
	return g, nil
}

// planText describes a decode plan: its split count and merge, and its ring
// depth (r2 = 2 stages).
func planText(p dispatch.DecodePlan) string {
	ring := dispatch.DecodeRingStages(p.Kernel, int(p.SharedBytes))
	switch {
	case p.Balanced():
		return fmt.Sprintf("balanced <=x%d r%d", p.Splits, ring)
	case p.Splits == 1:
		return fmt.Sprintf("single-pass r%d", ring)
	case p.Cluster > 0:
		return fmt.Sprintf("split-K x%d cluster r%d", p.Splits, ring)
	}
	return fmt.Sprintf("split-K x%d r%d", p.Splits, ring)
}

func (b *bencher) print() {
	fmt.Printf("\npagedkv bench on %s (driver %d), %s, build %s\n", b.rep.Device, b.rep.Driver, b.rep.Date, b.rep.Build)
	fmt.Printf("device-to-device copy: %.0f GB/s (bytes read + written)\n\n", b.rep.CopyGBps)
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', tabwriter.AlignRight)
	var app, dec, vl []benchResult
	for _, r := range b.rep.Results {
		switch r.Op {
		case "append":
			app = append(app, r)
		case "decode":
			dec = append(dec, r)
		case "varlen":
			vl = append(vl, r)
		}
	}
	if len(app) > 0 {
		fmt.Fprintln(tw, "cache op\tshape\tµs\tGB/s\t% copy\tgraph µs/call\t")
		for _, r := range app {
			fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.0f\t%.1f\t%.2f\t\n", r.DType, r.Shape, r.Micros, r.GBps, r.PctCopy, r.GraphMicros)
		}
		fmt.Fprintln(tw, "\t\t\t\t\t\t")
	}
	if len(dec) > 0 {
		fmt.Fprintln(tw, "decode\tshape\tplan\tµs\tGB/s K+V\t% copy\tbest forced\tregret\tbalanced µs\thost µs\t")
		for _, r := range dec {
			best, regret, balanced := "-", "-", "-"
			if r.BestMicros > 0 {
				best = fmt.Sprintf("x%d %.2fµs", r.BestSplits, r.BestMicros)
				regret = fmt.Sprintf("%+.1f%%", r.RegretPct)
			}
			if r.BalancedMicros > 0 {
				balanced = fmt.Sprintf("%.2f", r.BalancedMicros)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.0f\t%.1f\t%s\t%s\t%s\t%.1f\t\n", r.DType, r.Shape, r.Plan, r.Micros, r.GBps, r.PctCopy, best, regret, balanced, r.HostMicros)
		}
	}
	if len(vl) > 0 {
		if len(app)+len(dec) > 0 {
			fmt.Fprintln(tw) // a line without cells: the varlen columns align on their own
		}
		fmt.Fprintln(tw, "varlen\tshape\tplan\tµs\tTFLOP/s\tGB/s\t% copy\t")
		for _, r := range vl {
			gbps, pct := "-", "-"
			if r.GBps > 0 {
				gbps, pct = fmt.Sprintf("%.0f", r.GBps), fmt.Sprintf("%.1f", r.PctCopy)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.1f\t%s\t%s\t\n", r.DType, r.Shape, r.Plan, r.Micros, r.TFLOPS, gbps, pct)
		}
	}
	tw.Flush()
}

// hostSlots is the host copy of device slots (int64) as AppendArgs takes it.
func hostSlots(slots []int64) []int32 {
	h := make([]int32, len(slots))
	for i, v := range slots {
		h[i] = int32(v)
	}
	return h
}
