package pagedkv

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
)

// TestPlanMemo: a remembered plan comes back only for the key, knobs and
// facts it was made with, and the oldest entry makes room for a new one.
func TestPlanMemo(t *testing.T) {
	var m planMemo
	f1, f2 := &dispatch.DeviceFacts{SMs: 132}, &dispatch.DeviceFacts{SMs: 132}
	k := dispatch.DefaultKnobs()
	key := func(seqs int) dispatch.DecodeKey { return dispatch.DecodeKey{NumSeqs: seqs, HeadDim: 128} }
	plan := func(seqs int) dispatch.DecodePlan {
		return dispatch.DecodePlan{Launch: dispatch.Launch{Kernel: "k"}, SplitK: dispatch.SplitK{Splits: seqs}}
	}

	k1, p1 := key(1), plan(1)
	_, _, ok := m.get(&k1, &k, f1)
	assert.False(t, ok, "empty memo")
	m.put(&k1, &k, f1, &p1, driver.Function(7))
	got, fn, ok := m.get(&k1, &k, f1)
	assert.True(t, ok)
	assert.Equal(t, p1, got)
	assert.Equal(t, driver.Function(7), fn)
	_, _, ok = m.get(&k1, &k, f2)
	assert.False(t, ok, "other facts (a module loaded since)")
	other := k
	other.Clusters = false
	_, _, ok = m.get(&k1, &other, f1)
	assert.False(t, ok, "other knobs")
	k2 := key(2)
	_, _, ok = m.get(&k2, &k, f1)
	assert.False(t, ok, "other key")

	for seqs := 2; seqs <= len(m.entries); seqs++ {
		ks, ps := key(seqs), plan(seqs)
		m.put(&ks, &k, f1, &ps, 0)
	}
	_, _, ok = m.get(&k1, &k, f1)
	assert.True(t, ok, "still held with the memo just full")
	kn, pn := key(len(m.entries)+1), plan(len(m.entries)+1)
	m.put(&kn, &k, f1, &pn, 0)
	_, _, ok = m.get(&k1, &k, f1)
	assert.False(t, ok, "the oldest entry was replaced")
	got, _, ok = m.get(&kn, &k, f1)
	assert.True(t, ok)
	assert.Equal(t, pn, got)
	assert.Zero(t, testing.AllocsPerRun(100, func() { m.get(&kn, &k, f1) }), "a hit allocates nothing")
}
