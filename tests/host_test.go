package tests

import (
	"testing"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/internal/check"
)

// BenchmarkDecodeHost measures the host side of a small decode call (the
// bench's seqs=1, kv=512 shape): ns and allocations per call, not counting
// the stream synchronizations that keep the launch queue short. Sub-benchmarks
// split it: the whole Decode, DecodeWithPlan with the plan made once, and
// PlanDecode alone. Run with -test.cpuprofile to see where the time goes.
func BenchmarkDecodeHost(b *testing.B) {
	r := open(b, config.Options{})
	g := rng(b)
	s := r.Stream()
	p := decodeProblem(b, r, s, g, check.DecodeShape{Seqs: 1, QHeads: 32, KVHeads: 8, HeadDim: 128, BlockSize: 16,
		MaxBlocksPerSeq: 32, DType: pagedkv.F16, CacheDType: pagedkv.F16, MaxLen: 512})
	plan, err := r.PlanDecode(s, &p.Args)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, call func() error) {
		b.ReportAllocs()
		for i := range b.N {
			if err := call(); err != nil {
				b.Fatal(err)
			}
			if i%32 == 31 {
				b.StopTimer()
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		}
	}
	b.Run("Decode", func(b *testing.B) { run(b, func() error { return r.Decode(s, &p.Args) }) })
	b.Run("DecodeWithPlan", func(b *testing.B) { run(b, func() error { return r.DecodeWithPlan(s, &p.Args, plan) }) })
	b.Run("PlanDecode", func(b *testing.B) {
		run(b, func() error {
			_, err := r.PlanDecode(s, &p.Args)
			return err
		})
	})
}
