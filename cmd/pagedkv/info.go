package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
)

func runInfo(args []string) error {
	fs := flag.NewFlagSet("info", flag.ExitOnError)
	device := fs.Int("device", 0, "CUDA device ordinal")
	_ = fs.Parse(args)

	r, err := pagedkv.Open(pagedkv.Options{Device: *device})
	if err != nil {
		return err
	}
	defer r.Close()
	d := r.Info()
	fmt.Printf("driver     CUDA %d.%d\n", d.DriverVersion/1000, d.DriverVersion%1000/10)
	fmt.Printf("device     %d: %s, compute capability %d.%d\n", d.Ordinal, d.Name, d.ComputeMajor, d.ComputeMinor)
	fmt.Printf("SMs        %d\n", d.SMs)
	fmt.Printf("memory     %.1f GiB, L2 %.1f MiB, shared memory per block (opt-in) %d KiB\n",
		float64(d.TotalMemBytes)/(1<<30), float64(d.L2Bytes)/(1<<20), d.MaxSharedPerBlockOptin/1024)

	fmt.Println("\nconfiguration")
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	cfg := r.Config()
	fmt.Fprintln(tw, "  variable\tvalue\tsource")
	for _, k := range config.Keys() {
		v, _ := cfg.Value(k.File)
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.Env, v, cfg.Source(k.File))
	}
	tw.Flush()

	fmt.Println("\nmodules (JIT load on this GPU)")
	failed := 0
	for _, m := range pagedkv.Modules() {
		took, err := r.LoadModule(m)
		if errors.Is(err, pagedkv.ErrComputeCapability) {
			// A module built for a newer GPU (*_sm90 below 9.0) cannot load
			// here by design; that is not a JIT failure.
			fmt.Printf("  %-20s skipped: %v\n", m, err)
			continue
		}
		if err != nil {
			failed++
			fmt.Printf("  %-20s FAILED after %v:\n%v\n", m, took.Round(1e6), err)
			continue
		}
		fmt.Printf("  %-20s ok  %8.1f ms\n", m, float64(took.Microseconds())/1000)
	}
	if failed > 0 {
		return fmt.Errorf("pagedkv: %d module(s) failed to load on %s", failed, d.Name)
	}
	return nil
}
