// Command serving is an engine loop on pagedkv that an engine author can
// copy: requests of random lengths arrive, their prompts' K/V go into a
// paged bf16 cache (Append) and are prefilled through Varlen, then every step
// appends one token per running request and decodes the batch with a CUDA
// graph captured once per batch size and replayed while the lengths grow;
// finished requests retire and new ones are admitted between steps.
//
// It checks a sample of its outputs against float64 attention computed on
// the host (attention64) and prints decode tokens/s and per-step latency:
//
//	go run ./examples/serving [-steps 300] [-slots 32] [-seed 1]
//
// Blocks come from a shuffled free list, so a request's pages are scattered
// through the pool as in a real engine. Host staging uses the blocking
// Upload for brevity; an engine overlaps it (UploadAsync from HostMemory).
package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/pagedkv/pagedkv"
)

const (
	qHeads, kvHeads, headDim = 32, 8, 128
	blockSize                = 16
	capacity                 = 4096 // the longest request, and the graphs' KVCapacity
	maxBlocks                = capacity / blockSize
	maxPrompt, maxGen        = 1024, 512
	tolerance                = 0.02 // relative L2 error allowed against float64 (bf16 inputs)
)

// request is one sequence: its pages and, for the checks, its K/V as the
// cache holds them (bf16-rounded).
type request struct {
	blocks    []int32
	length    int // tokens in the cache
	remaining int // tokens still to generate
	k, v      []float32
}

// engine holds the device state of the loop.
type engine struct {
	rt    *pagedkv.Runtime
	s     *pagedkv.Stream
	rng   *rand.Rand
	held  []*pagedkv.Memory
	free  []int32 // free block ids
	kc    pagedkv.Buffer
	vc    pagedkv.Buffer
	slots int

	// Fixed buffers the decode graphs captured: their contents change
	// between replays, their addresses never.
	q, out, tables, lens pagedkv.Buffer
	graphs               map[int]*pagedkv.Graph
	// Staging for the K/V and slots of the tokens written in one call.
	kStage, vStage, slotStage pagedkv.Buffer
}

// maxWrite is the most tokens one call writes: four prompts.
const maxWrite = 4 * maxPrompt

func main() {
	steps := flag.Int("steps", 300, "decode steps to run")
	slots := flag.Int("slots", 32, "requests running at most at once")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()
	if *steps < 1 || *slots < 1 {
		fmt.Fprintf(os.Stderr, "serving: -steps=%d -slots=%d; allowed: 1 or more each\n", *steps, *slots)
		os.Exit(2)
	}
	if err := run(*steps, *slots, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "serving:", err)
		os.Exit(1)
	}
}

func run(steps, slots int, seed uint64) error {
	rt, err := pagedkv.Open(pagedkv.Options{})
	if errors.Is(err, pagedkv.ErrNoDriver) || errors.Is(err, pagedkv.ErrNoDevice) {
		return fmt.Errorf("needs an NVIDIA GPU: %w", err)
	}
	if err != nil {
		return err
	}
	defer rt.Close()
	e := &engine{rt: rt, s: rt.Stream(), rng: rand.New(rand.NewPCG(seed, 7)), slots: slots, graphs: map[int]*pagedkv.Graph{}}
	defer e.release()
	numBlocks := slots * maxBlocks
	cacheBytes := int64(numBlocks * blockSize * kvHeads * headDim * 2)
	if e.kc, err = e.alloc(cacheBytes); err != nil {
		return err
	}
	if e.vc, err = e.alloc(cacheBytes); err != nil {
		return err
	}
	for _, b := range []struct {
		dst   *pagedkv.Buffer
		bytes int64
	}{{&e.q, int64(slots * qHeads * headDim * 2)}, {&e.out, int64(slots * qHeads * headDim * 2)},
		{&e.tables, int64(slots * maxBlocks * 4)}, {&e.lens, int64(slots * 4)},
		{&e.kStage, maxWrite * kvHeads * headDim * 2}, {&e.vStage, maxWrite * kvHeads * headDim * 2},
		{&e.slotStage, maxWrite * 8}} {
		if *b.dst, err = e.alloc(b.bytes); err != nil {
			return err
		}
	}
	e.free = make([]int32, numBlocks)
	for i := range e.free {
		e.free[i] = int32(i)
	}
	e.rng.Shuffle(len(e.free), func(i, j int) { e.free[i], e.free[j] = e.free[j], e.free[i] })

	var running []*request
	var stepTimes []time.Duration
	decoded, checks := 0, 0
	start := time.Now()
	for step := range steps {
		// Retire finished requests, then admit new ones into free room.
		running = slices.DeleteFunc(running, func(r *request) bool {
			if r.remaining > 0 {
				return false
			}
			e.free = append(e.free, r.blocks...)
			return true
		})
		var admitted []*request
		for len(running)+len(admitted) < slots && (len(running) == 0 || e.rng.IntN(3) == 0) {
			admitted = append(admitted, &request{length: 0, remaining: 1 + e.rng.IntN(maxGen)})
			if len(admitted) == 4 {
				break
			}
		}
		if len(admitted) > 0 {
			checked, err := e.prefill(admitted, step%10 == 0)
			if err != nil {
				return fmt.Errorf("step %d: prefill: %w", step, err)
			}
			checks += checked
			running = append(running, admitted...)
		}
		t0 := time.Now()
		checked, err := e.decode(running, step%25 == 0)
		if err != nil {
			return fmt.Errorf("step %d: decode of %d requests: %w", step, len(running), err)
		}
		stepTimes = append(stepTimes, time.Since(t0))
		checks += checked
		decoded += len(running)
	}
	wall := time.Since(start)
	var total time.Duration
	for _, d := range stepTimes {
		total += d
	}
	slices.Sort(stepTimes)
	info := rt.Info()
	fmt.Printf("%s: %d decode steps, %d graphs (one per batch size), %d outputs checked against float64\n",
		info.Name, steps, len(e.graphs), checks)
	fmt.Printf("decode: %.0f tokens/s; step latency p50 %v, p99 %v (append + uploads + graph replay, synchronized)\n",
		float64(decoded)/total.Seconds(), stepTimes[len(stepTimes)/2], stepTimes[len(stepTimes)*99/100])
	fmt.Printf("wall %v with prefills and checks\n", wall.Round(time.Millisecond))
	return nil
}

func (e *engine) alloc(bytes int64) (pagedkv.Buffer, error) {
	m, err := e.rt.Alloc(bytes)
	if err != nil {
		return pagedkv.Buffer{}, err
	}
	e.held = append(e.held, m)
	return m.Buffer, nil
}

// scratch allocates a buffer for one call; the caller frees it.
func (e *engine) scratch(bytes int64) (*pagedkv.Memory, error) { return e.rt.Alloc(max(bytes, 16)) }

func (e *engine) release() {
	for _, g := range e.graphs {
		_ = g.Close()
	}
	for _, m := range e.held {
		_ = m.Free()
	}
}

// random returns n bf16 values in [-1, 1) and their float32 values.
func (e *engine) random(n int) ([]uint16, []float32) {
	f := make([]float32, n)
	for i := range f {
		f[i] = 2*e.rng.Float32() - 1
	}
	raw := make([]uint16, n)
	_ = pagedkv.BF16FromFloat32(raw, f)
	_ = pagedkv.Float32FromBF16(f, raw)
	return raw, f
}

// grow gives r the pages for tokens more tokens and returns their slots.
func (e *engine) grow(r *request, tokens int) ([]int64, error) {
	slots := make([]int64, tokens)
	for i := range tokens {
		pos := r.length + i
		if pos >= capacity {
			return nil, fmt.Errorf("a request reached %d tokens, the capacity", pos)
		}
		if pos/blockSize == len(r.blocks) {
			if len(e.free) == 0 {
				return nil, errors.New("out of cache blocks")
			}
			r.blocks = append(r.blocks, e.free[len(e.free)-1])
			e.free = e.free[:len(e.free)-1]
		}
		slots[i] = int64(r.blocks[pos/blockSize])*blockSize + int64(pos%blockSize)
	}
	return slots, nil
}

// appendTokens writes tokens new tokens of each request (per[i] of rs[i])
// into the cache, and keeps their K/V on the host.
func (e *engine) appendTokens(rs []*request, per []int) error {
	total := 0
	for _, n := range per {
		total += n
	}
	row := kvHeads * headDim
	kRaw, kf := e.random(total * row)
	vRaw, vf := e.random(total * row)
	var slots []int64
	at := 0
	for i, r := range rs {
		s, err := e.grow(r, per[i])
		if err != nil {
			return err
		}
		slots = append(slots, s...)
		r.k = append(r.k, kf[at*row:(at+per[i])*row]...)
		r.v = append(r.v, vf[at*row:(at+per[i])*row]...)
		r.length += per[i]
		at += per[i]
	}
	if total > maxWrite {
		return fmt.Errorf("%d tokens in one write, more than the %d staged", total, maxWrite)
	}
	// Upload waits for the stream, so the staging buffers are free again
	// when the next call fills them.
	for _, err := range []error{pagedkv.Upload(e.s, e.kStage, kRaw), pagedkv.Upload(e.s, e.vStage, vRaw), pagedkv.Upload(e.s, e.slotStage, slots)} {
		if err != nil {
			return err
		}
	}
	return e.rt.Append(e.s, &pagedkv.AppendArgs{
		K: e.kStage, V: e.vStage, KCache: e.kc, VCache: e.vc, SlotMapping: e.slotStage,
		NumTokens: total, NumKVHeads: kvHeads, HeadDim: headDim, BlockSize: blockSize, NumBlocks: e.slots * maxBlocks,
		DType: pagedkv.BF16, CacheDType: pagedkv.BF16, HostSlotMapping: hostSlots(slots),
	})
}

// hostSlots is the host copy of slots the planner reads (int32: every slot
// of a pool fits).
func hostSlots(slots []int64) []int32 {
	h := make([]int32, len(slots))
	for i, s := range slots {
		h[i] = int32(s)
	}
	return h
}

// tableRows returns the block tables of rs, one row of maxBlocks each.
func tableRows(rs []*request) []int32 {
	t := make([]int32, len(rs)*maxBlocks)
	for i, r := range rs {
		copy(t[i*maxBlocks:], r.blocks)
	}
	return t
}

// prefill writes the prompts of the admitted requests and runs their
// causal attention as one Varlen; with check, it compares the last query
// row of the first request against float64 and returns 1.
func (e *engine) prefill(rs []*request, check bool) (int, error) {
	prompts := make([]int, len(rs))
	cu := []int32{0}
	pos := make([]int32, len(rs))
	for i := range rs {
		prompts[i] = 1 + e.rng.IntN(maxPrompt)
		cu = append(cu, cu[i]+int32(prompts[i]))
	}
	if err := e.appendTokens(rs, prompts); err != nil {
		return 0, err
	}
	tokens := int(cu[len(rs)])
	qRaw, qf := e.random(tokens * qHeads * headDim)
	bufs := make([]*pagedkv.Memory, 0, 5)
	defer func() {
		for _, m := range bufs {
			_ = m.Free()
		}
	}()
	get := func(bytes int64) (pagedkv.Buffer, error) {
		m, err := e.scratch(bytes)
		if err != nil {
			return pagedkv.Buffer{}, err
		}
		bufs = append(bufs, m)
		return m.Buffer, nil
	}
	q, err1 := get(int64(len(qRaw) * 2))
	out, err2 := get(int64(len(qRaw) * 2))
	tb, err3 := get(int64(len(rs) * maxBlocks * 4))
	cub, err4 := get(int64(len(cu) * 4))
	posb, err5 := get(int64(len(pos) * 4))
	err := errors.Join(err1, err2, err3, err4, err5)
	if err != nil {
		return 0, err
	}
	tables := tableRows(rs)
	for _, err := range []error{pagedkv.Upload(e.s, q, qRaw), pagedkv.Upload(e.s, tb, tables),
		pagedkv.Upload(e.s, cub, cu), pagedkv.Upload(e.s, posb, pos)} {
		if err != nil {
			return 0, err
		}
	}
	err = e.rt.Varlen(e.s, &pagedkv.VarlenArgs{
		Q: q, KCache: e.kc, VCache: e.vc, BlockTables: tb, CuSeqlensQ: cub, PosOffsets: posb, Out: out,
		NumSeqs: len(rs), NumTokens: tokens, NumQHeads: qHeads, NumKVHeads: kvHeads, HeadDim: headDim,
		BlockSize: blockSize, NumBlocks: e.slots * maxBlocks, MaxBlocksPerSeq: maxBlocks, MaxKVLen: maxPrompt,
		HostCuSeqlensQ: cu, HostPosOffsets: pos, Causal: true, DType: pagedkv.BF16, CacheDType: pagedkv.BF16,
	})
	if err != nil || !check {
		return 0, err
	}
	// The last query row of request 0 attends its whole prompt.
	r, last := rs[0], int(cu[1])-1
	row := qHeads * headDim
	got := make([]uint16, row)
	lastRow, err := out.Slice(int64(last*row*2), int64(row*2))
	if err != nil {
		return 0, err
	}
	if err := pagedkv.Download(e.s, got, lastRow); err != nil {
		return 0, err
	}
	return 1, compare(fmt.Sprintf("prefill of %d tokens", r.length), got, r, qf[last*row:(last+1)*row])
}

// decode appends one token to every running request and replays the
// decode graph of this batch size (capturing it the first time); with
// check, it compares request 0's output against float64 and returns 1.
func (e *engine) decode(rs []*request, check bool) (int, error) {
	b := len(rs)
	if b == 0 {
		return 0, nil
	}
	one := make([]int, b)
	for i := range one {
		one[i] = 1
	}
	if err := e.appendTokens(rs, one); err != nil {
		return 0, err
	}
	lens := make([]int32, b)
	for i, r := range rs {
		lens[i] = int32(r.length)
		r.remaining--
	}
	qRaw, qf := e.random(b * qHeads * headDim)
	for _, err := range []error{pagedkv.Upload(e.s, e.q, qRaw), pagedkv.Upload(e.s, e.tables, tableRows(rs)), pagedkv.Upload(e.s, e.lens, lens)} {
		if err != nil {
			return 0, err
		}
	}
	g, ok := e.graphs[b]
	if !ok {
		var err error
		if g, err = e.capture(b); err != nil {
			return 0, fmt.Errorf("capturing the decode of batch size %d: %w", b, err)
		}
		e.graphs[b] = g
	}
	if err := g.Launch(e.s); err != nil {
		return 0, err
	}
	// Fault waits for the stream, then reports a bad block-table entry or
	// length the replayed kernels found (they never touch memory outside
	// the buffers, but record it; PAGEDKV_CHECK_BOUNDS does not cover
	// graph replays).
	if err := e.s.Fault(); err != nil {
		return 0, err
	}
	if !check {
		return 0, nil
	}
	row := qHeads * headDim
	got := make([]uint16, row)
	if err := pagedkv.Download(e.s, got, e.out); err != nil {
		return 0, err
	}
	return 1, compare(fmt.Sprintf("decode at %d tokens, batch %d", rs[0].length, b), got, rs[0], qf[:row])
}

// capture records the decode of a batch of b requests over the fixed
// buffers, planned for the capacity, so that one graph serves every length.
func (e *engine) capture(b int) (*pagedkv.Graph, error) {
	a := pagedkv.DecodeArgs{
		Q: e.q, KCache: e.kc, VCache: e.vc, BlockTables: e.tables, KVLens: e.lens, Out: e.out,
		NumSeqs: b, NumQHeads: qHeads, NumKVHeads: kvHeads, HeadDim: headDim, BlockSize: blockSize,
		NumBlocks: e.slots * maxBlocks, MaxBlocksPerSeq: maxBlocks, MaxKVLen: capacity, KVCapacity: capacity,
		DType: pagedkv.BF16, CacheDType: pagedkv.BF16,
	}
	if err := e.rt.ReserveDecode(e.s, &a); err != nil {
		return nil, err
	}
	if err := e.s.BeginCapture(); err != nil {
		return nil, err
	}
	derr := e.rt.Decode(e.s, &a)
	g, err := e.s.EndCapture()
	if err := errors.Join(derr, err); err != nil {
		if g != nil {
			_ = g.Close()
		}
		return nil, err
	}
	return g, nil
}

// compare checks the output row got (bf16, [qHeads, headDim]) of query q
// over all of r's tokens against float64 attention computed here.
func compare(what string, got []uint16, r *request, q []float32) error {
	want := attention64(q, r.k, r.v, r.length)
	g32 := make([]float32, len(got))
	_ = pagedkv.Float32FromBF16(g32, got)
	var num, den float64
	for i, x := range g32 {
		d := float64(x) - want[i]
		num += d * d
		den += want[i] * want[i]
	}
	if d := math.Sqrt(num / den); !(d <= tolerance) {
		return fmt.Errorf("%s: relative L2 error %.3g against float64, above %.3g", what, d, tolerance)
	}
	return nil
}

// attention64 is one query token's attention over n tokens in float64: q
// [qHeads, headDim], k and v [n, kvHeads, headDim] as the request wrote
// them; query head h reads KV head h / (qHeads / kvHeads).
func attention64(q, k, v []float32, n int) []float64 {
	out := make([]float64, qHeads*headDim)
	scores := make([]float64, n)
	for h := range qHeads {
		kvh := h / (qHeads / kvHeads)
		qh := q[h*headDim : (h+1)*headDim]
		top := math.Inf(-1)
		for t := range n {
			kt := k[(t*kvHeads+kvh)*headDim:][:headDim]
			var dot float64
			for d := range headDim {
				dot += float64(qh[d]) * float64(kt[d])
			}
			scores[t] = dot / math.Sqrt(headDim)
			top = max(top, scores[t])
		}
		var sum float64
		for t := range n {
			scores[t] = math.Exp(scores[t] - top)
			sum += scores[t]
		}
		o := out[h*headDim : (h+1)*headDim]
		for t := range n {
			vt := v[(t*kvHeads+kvh)*headDim:][:headDim]
			for d := range headDim {
				o[d] += scores[t] / sum * float64(vt[d])
			}
		}
	}
	return out
}
