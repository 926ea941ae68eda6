package pagedkv

import (
	"math/bits"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// Launching, shared by the op files: launchPlan enqueues a plan's single
// kernel, and the helpers turn plan and argument values into the kernels'
// parameter types. (Decode, whose plans may launch two kernels or a
// cluster, launches from decode.go with the same helpers.)

// launchPlan enqueues the single kernel of plan with parameters p on s and
// applies the CHECK_BOUNDS mode. A plan with an empty grid launches nothing.
func launchPlan[T any](r *Runtime, s *Stream, plan *dispatch.Plan, p *T) error {
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

// dim converts a plan's grid or block shape to the driver's.
func dim(d dispatch.Dim3) driver.Dim3 { return driver.Dim3{X: d.X, Y: d.Y, Z: d.Z} }

// log2 returns the base-2 logarithm of v, a power of two (the BlockSizeLog2
// parameter of the kernels).
func log2(v int) int32 { return int32(bits.TrailingZeros(uint(v))) }
