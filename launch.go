package pagedkv

import (
	"errors"
	"math"
	"math/bits"
	"reflect"
	"strings"
	"sync"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/scratch"
)

// Launching, shared by the op files: launchPlan enqueues a plan's single
// kernel, and the helpers turn plan and argument values into the kernels'
// parameter types. (Decode, whose plans may launch two kernels or a
// cluster, launches from decode.go with the same helpers.)

// launchPlan enqueues the single kernel of plan with parameters p on s and
// applies the CHECK_BOUNDS mode. A plan with an empty grid launches nothing.
func launchPlan[T any](r *Runtime, s *Stream, plan *dispatch.Launch, p *T) error {
	if plan.Grid.X == 0 {
		return nil
	}
	fn, _, err := r.function(plan.Kernel)
	if err != nil {
		return err
	}
	capturing := false
	if r.cfg.CheckBounds {
		if capturing, err = s.capturing(); err != nil {
			return err
		}
	}
	err = r.do(func() error {
		return driver.Launch(fn, dim(plan.Grid), dim(plan.Block), plan.SharedBytes, s.s, p)
	})
	if err != nil {
		return err
	}
	return s.afterLaunch(capturing)
}

// enqueue runs launch in one pass through r's context (Context.Do) with
// whether s is capturing a graph: the attention ops plan and launch from
// there, so a call costs one context check and one capture query.
func (r *Runtime) enqueue(s *Stream, launch func(capturing bool) error) error {
	return r.do(func() error {
		capturing, err := s.s.IsCapturing()
		if err != nil {
			return err
		}
		return launch(capturing)
	})
}

// planOn returns the plan an attention op would follow on s right now (op
// names the call for the errors): after
// r is checked live and validate passes, plan runs in enqueue's pass with
// whether s is capturing (a graph's plan then).
func planOn[P any](r *Runtime, op string, s *Stream, validate func() error, plan func(capturing bool) (P, error)) (P, error) {
	var p P
	if err := r.on(op, s); err != nil {
		return p, err
	}
	if err := validate(); err != nil {
		return p, err
	}
	err := r.enqueue(s, func(capturing bool) error {
		var err error
		p, err = plan(capturing)
		return err
	})
	return p, err
}

// planMismatch is the error of a WithPlan call whose plan is not one for
// its arguments: it names the first of fields (all of Plan's when none are
// given) in which plan differs from want, the plan for those arguments,
// with both values. op is the call, arg the argument struct, from the
// planner that makes plans for it.
//
// The plans come by value: a pointer handed to reflect would move the
// callers' plans to the heap on the path that accepts the plan.
func planMismatch[P plan](op, arg, from string, plan, want P, fields ...string) error {
	pv, wv := reflect.ValueOf(&plan).Elem(), reflect.ValueOf(&want).Elem()
	if len(fields) == 0 {
		for _, f := range reflect.VisibleFields(pv.Type()) {
			if !f.Anonymous {
				fields = append(fields, f.Name)
			}
		}
	}
	for _, f := range fields {
		got, need := pv.FieldByName(f).Interface(), wv.FieldByName(f).Interface()
		if !reflect.DeepEqual(got, need) {
			return errf("%s: the plan is not a plan for this %s: %s.%s=%v, where this %s needs %v; take the plan from %s for these arguments",
				op, arg, pv.Type().Name(), f, got, arg, need, from)
		}
	}
	return errf("%s: the plan (%s) is not a plan for this %s; take it from %s for these arguments", op, plan, arg, from)
}

// plan is what planMismatch compares: a plan of any op.
type plan interface {
	dispatch.DecodePlan | dispatch.VarlenPlan | dispatch.TokenPlan
	String() string
}

// planError makes an error of the planner, for arguments that Validate
// accepted, an argument error of the op: it matches ErrInvalidArgument
// besides dispatch.ErrInvalidShape, and names the fields as arg (the
// argument struct) spells them instead of as shape (the planner's view of
// it) does. Knobs keep their name: the caller passed them.
func planError(err error, shape, arg string) error {
	if err == nil || !errors.Is(err, dispatch.ErrInvalidShape) {
		return err
	}
	msg := strings.ReplaceAll(err.Error(), shape+".", arg+".")
	msg = "pagedkv: " + strings.TrimPrefix(msg, "dispatch: ")
	return &argError{&renamedError{msg, err}}
}

// renamedError is an error under another text.
type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }

// dim converts a plan's grid or block shape to the driver's.
func dim(d dispatch.Dim3) driver.Dim3 { return driver.Dim3{X: d.X, Y: d.Y, Z: d.Z} }

// log2 returns the base-2 logarithm of v, a power of two (the BlockSizeLog2
// parameter of the kernels).
func log2(v int) int32 { return int32(bits.TrailingZeros(uint(v))) }

// splitScratch is where a split-K launch keeps its scratch: the f32
// partials at base (the plan's offsets count floats from there) and the
// merge counters at counters.
type splitScratch struct {
	base, counters driver.DevicePtr
	// lease and counterLease are the stream's pool leases (zero for a
	// caller's workspace), held until the launches are enqueued.
	lease, counterLease scratch.Lease
}

// release gives the leases back.
func (sc *splitScratch) release() {
	sc.counterLease.Release()
	sc.lease.Release()
}

// reserveSplit sizes stream s's scratch and counter pools for a plan's
// split-K.
func (r *Runtime) reserveSplit(s *Stream, plan *dispatch.SplitK) error {
	if err := r.scratch.Reserve(uintptr(s.s), plan.ScratchFloats); err != nil {
		return err
	}
	return r.counters.Reserve(uintptr(s.s), plan.Counters)
}

// acquireScratch places plan's split-K scratch: in ws, the caller's
// workspace (at least plan.WorkspaceBytes; counters first, then the floats),
// or in leases of stream s's pools. arg and op name the argument struct and
// the op for the error of a workspace too small. A plan without scratch
// gets none.
func (r *Runtime) acquireScratch(s *Stream, ws Buffer, plan *dispatch.SplitK, capturing bool, arg, op string) (splitScratch, error) {
	var sc splitScratch
	if plan.ScratchFloats == 0 {
		return sc, nil
	}
	if !ws.IsZero() {
		if need := plan.WorkspaceBytes(); ws.Bytes < need {
			return sc, errf("%s.Workspace has %d bytes; this %s's plan (%d splits) needs %d (WorkspaceBytes of the plan)", arg, ws.Bytes, op, plan.Splits, need)
		}
		sc.counters = ws.Ptr
		sc.base = ws.Ptr + driver.DevicePtr(plan.WorkspaceFloatsOffset())
		return sc, nil
	}
	var err error
	if sc.lease, err = r.scratch.Acquire(uintptr(s.s), plan.ScratchFloats, capturing); err != nil {
		return splitScratch{}, err
	}
	if sc.counterLease, err = r.counters.Acquire(uintptr(s.s), plan.Counters, capturing); err != nil {
		sc.lease.Release()
		return splitScratch{}, err
	}
	sc.base, sc.counters = driver.DevicePtr(sc.lease.Ptr), driver.DevicePtr(sc.counterLease.Ptr)
	return sc, nil
}

// kernelScales returns the softmax scale (1/√HeadDim for 0) and the K and V
// scales the attention kernels take (1 for a 16-bit cache).
func (p *pagedAttention) kernelScales() (scale, k, v float32) {
	scale, k, v = p.scale, 1, 1
	if scale == 0 {
		scale = float32(1 / math.Sqrt(float64(p.headDim)))
	}
	if p.cacheDType == E4M3 {
		k, v = p.kScale, p.vScale
	}
	return scale, k, v
}

// qStride returns the element stride between q rows for a stride argument
// (0: contiguous rows of NumQHeads·HeadDim).
func (p *pagedAttention) qStride(stride int) int64 {
	if stride == 0 {
		return int64(p.numQHeads) * int64(p.headDim)
	}
	return int64(stride)
}

// planMemo holds the last few decode plans with what they were planned
// from. Planning a decode reads the device facts' occupancy tables by kernel
// name (about 0.4 µs on the H200 host, of a 5 µs call): a hit costs a lock
// and a scan of a few comparable keys.
type planMemo struct {
	mu      sync.Mutex
	next    int
	entries [8]planMemoEntry
}

type planMemoEntry struct {
	key   dispatch.DecodeKey
	knobs dispatch.Knobs
	facts *dispatch.DeviceFacts // nil: empty
	plan  dispatch.DecodePlan
	fn    driver.Function
}

// get returns the plan remembered for key, knobs and facts.
func (m *planMemo) get(key *dispatch.DecodeKey, knobs *dispatch.Knobs, facts *dispatch.DeviceFacts) (dispatch.DecodePlan, driver.Function, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.entries {
		if e := &m.entries[i]; e.facts == facts && e.key == *key && e.knobs == *knobs {
			return e.plan, e.fn, true
		}
	}
	return dispatch.DecodePlan{}, 0, false
}

// put remembers plan, replacing the oldest entry.
func (m *planMemo) put(key *dispatch.DecodeKey, knobs *dispatch.Knobs, facts *dispatch.DeviceFacts, plan *dispatch.DecodePlan, fn driver.Function) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.entries[m.next] = planMemoEntry{key: *key, knobs: *knobs, facts: facts, plan: *plan, fn: fn}
	m.next = (m.next + 1) % len(m.entries)
}

// batchPart is an op that can run as one part of a mixed batch: the
// decode of a mixed Varlen's leading one-token sequences.
type batchPart interface {
	launchPart(r *Runtime, s *Stream, part batchView, plan *dispatch.DecodePlan) error
}

// runPart launches op as one part of a mixed batch, following plan.
func runPart(r *Runtime, s *Stream, op batchPart, part batchView, plan *dispatch.DecodePlan) error {
	return op.launchPart(r, s, part, plan)
}

// batchView holds what the kernels of one launch apply to the caller's
// device arrays so that none of them needs rewriting: for one part of a
// mixed Varlen (a decode of its leading one-token sequences and a varlen of
// the rest, see planMixed), the offsets that make the batch's arrays that
// part's; for SequenceAttention's one sequence, its lengths. Zero in every
// call an engine makes.
type batchView struct {
	// kvBias (DecodeArgs) is added to every KVLens entry: 1 for the decode
	// part, whose KVLens is the batch's PosOffsets (a decode row's KV
	// length is its offset + 1).
	kvBias int32
	// cuBase (VarlenArgs) is subtracted from every CuSeqlensQ entry: the
	// first bound of the varlen part, whose CuSeqlensQ is a view of the
	// batch's from its first sequence on.
	cuBase int32
	// seqBase (VarlenArgs) is that first sequence's index in the batch,
	// which the kernels add to the sequence a fault names.
	seqBase int32
	// oneSeq (VarlenArgs) runs the varlen as one sequence of NumTokens
	// tokens whose first sits at KV position onePos, from kernel
	// parameters: its CuSeqlensQ and PosOffsets are not read (null in the
	// kernels' parameters). A graph that captures it holds the values.
	oneSeq bool
	onePos int32
}
