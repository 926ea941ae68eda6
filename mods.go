package pagedkv

import (
	"math"

	"github.com/pagedkv/pagedkv/driver"
)

// maxSlidingWindow is the largest SlidingWindow: token positions are int32
// in the kernels and a sequence holds at most 2^30 tokens.
const maxSlidingWindow = 1 << 30

// scoreMods are an attention op's score modifiers as its Args hold them
// (DecodeArgs' SlidingWindow, SoftCap, Sinks, AlibiSlopes).
type scoreMods struct {
	window       int
	softCap      float32
	sinks, alibi Buffer
}

// on reports whether any modifier is set.
func (m *scoreMods) on() bool {
	return m.window != 0 || m.softCap != 0 || !m.sinks.IsZero() || !m.alibi.IsZero()
}

// check validates m for an op of arg over numQHeads heads, recording Sinks
// and AlibiSlopes as read spans. Every cache dtype has kernels for them.
func (m *scoreMods) check(arg string, sp *spans, numQHeads int) error {
	if m.window < 0 || m.window > maxSlidingWindow {
		return errf("%s.SlidingWindow=%d is out of range; allowed: 0 (none) or 1..%d", arg, m.window, maxSlidingWindow)
	}
	if m.softCap < 0 || math.IsNaN(float64(m.softCap)) || math.IsInf(float64(m.softCap), 0) {
		return errf("%s.SoftCap=%g is not allowed; allowed: 0 (off) or a finite value > 0", arg, m.softCap)
	}
	if !m.on() {
		return nil
	}
	for _, b := range [...]struct {
		field string
		buf   Buffer
	}{{"Sinks", m.sinks}, {"AlibiSlopes", m.alibi}} {
		if b.buf.IsZero() {
			continue
		}
		if err := sp.buffer(b.field, b.buf, int64(numQHeads)*4, 4, read); err != nil {
			return err
		}
	}
	return nil
}

// params returns the kernel parameters of m (the _mods entries' last four).
func (m *scoreMods) params() modParams {
	return modParams{Window: int32(m.window), SoftCap: m.softCap, Sinks: m.sinks.Ptr, AlibiSlopes: m.alibi.Ptr}
}

// modParams are the score modifiers' kernel parameters, in PTX order.
type modParams struct {
	Window             int32
	SoftCap            float32
	Sinks, AlibiSlopes driver.DevicePtr
}
