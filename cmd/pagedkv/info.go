package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/pagedkv/pagedkv"
	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/ptx"
)

// infoOptions are pagedkv info's flags, checked.
type infoOptions struct {
	Device int
}

// parseInfo parses and checks pagedkv info's arguments (after "info")
// without touching a device. Errors are a *usageError or a *helpRequest.
func parseInfo(args []string) (infoOptions, error) {
	fs := newFlagSet("info", "pagedkv info [flags]")
	device := fs.Int("device", 0, "CUDA device ordinal")
	if err := parseFlags(fs, args); err != nil {
		return infoOptions{}, err
	}
	o := infoOptions{Device: *device}
	if err := checkDevice("info", o.Device); err != nil {
		return infoOptions{}, err
	}
	return o, nil
}

// runInfo prints the driver, the device, the configuration in effect, and
// loads every embedded module, printing per module which image loaded (the
// recorded JIT code, the SASS or the PTX), why and how long it took, and
// the total load time last. Without a driver or a device it prints
// what it can know without one (the configuration, the embedded modules)
// and one line saying why there is no GPU, and succeeds: info describes the
// machine, and a machine without a GPU is a valid answer.
func runInfo(args []string) error {
	o, err := parseInfo(args)
	if err != nil {
		return err
	}
	// Loaded here as well as by Open so that a bad knob is reported, and the
	// configuration shown, whether or not there is a GPU.
	cfg, err := config.Load(config.Options{})
	if err != nil {
		return err
	}
	r, err := pagedkv.Open(pagedkv.Options{Device: o.Device})
	if reason, ok := noGPUReason(err); ok {
		return printNoGPU(os.Stdout, cfg, reason)
	}
	if err != nil {
		return err
	}
	defer r.Close()
	d := r.Info()
	fmt.Printf("build      %s\n", buildStamp())
	fmt.Printf("driver     CUDA %d.%d\n", d.DriverVersion/1000, d.DriverVersion%1000/10)
	fmt.Printf("device     %d: %s, compute capability %d.%d\n", d.Ordinal, d.Name, d.ComputeMajor, d.ComputeMinor)
	fmt.Printf("SMs        %d\n", d.SMs)
	fmt.Printf("memory     %.1f GiB, L2 %.1f MiB, shared memory per block (opt-in) %d KiB\n",
		float64(d.TotalMemBytes)/(1<<30), float64(d.L2Bytes)/(1<<20), d.MaxSharedPerBlockOptin/1024)
	fmt.Println()
	printConfig(os.Stdout, r.Config())

	fmt.Println("\nmodules (loaded on this GPU as PAGEDKV_LOAD_SASS says: the recorded JIT code, the embedded SASS or the PTX, and why)")
	failed, loaded, width := 0, 0, nameWidth(pagedkv.Modules())
	var total time.Duration
	for _, m := range pagedkv.Modules() {
		entries, err := moduleEntries(m)
		if err != nil {
			return err
		}
		took, err := r.LoadModule(m)
		total += took
		if errors.Is(err, pagedkv.ErrComputeCapability) {
			// A module built for other GPUs (*_sm90 below 9.0, *_sm90a
			// anywhere but 9.0) cannot load here by design; that is not a
			// JIT failure.
			fmt.Printf("  %-*s  %s  skipped: %v\n", width, m, entries, err)
			continue
		}
		if err != nil {
			failed++
			fmt.Printf("  %-*s  %s  FAILED after %v:\n%v\n", width, m, entries, took.Round(time.Millisecond), err)
			continue
		}
		loaded++
		image, _ := r.ModuleImage(m)
		fmt.Printf("  %-*s  %s  ok  %8.1f ms  %s\n", width, m, entries, milliseconds(took), image)
		if image.Refused != nil {
			fmt.Printf("    (refused first: %v)\n", image.Refused)
		}
	}
	fmt.Printf("\n%d modules loaded in %.1f ms\n", loaded, milliseconds(total))
	if failed > 0 {
		return fmt.Errorf("pagedkv: %d module(s) failed to load on %s", failed, d.Name)
	}
	return nil
}

// milliseconds returns d in milliseconds, to a microsecond.
func milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// printNoGPU writes info's report for a machine without a usable GPU: the
// configuration, the embedded modules and, last, one line with reason.
func printNoGPU(w io.Writer, cfg config.Config, reason string) error {
	printConfig(w, cfg)
	fmt.Fprintln(w, "\nmodules (embedded; JIT-loading them needs a GPU)")
	width := nameWidth(pagedkv.Modules())
	for _, m := range pagedkv.Modules() {
		entries, err := moduleEntries(m)
		if err != nil {
			return err
		}
		cc, exactly := ptx.ModuleComputeCapability(m), ""
		if ptx.ModuleArchSpecific(m) {
			exactly = fmt.Sprintf(" exactly (sm_%da)", cc)
		}
		fmt.Fprintf(w, "  %-*s  %s  needs compute capability %d.%d%s\n", width, m, entries, cc/10, cc%10, exactly)
	}
	fmt.Fprintf(w, "\nbuild      %s\n", buildStamp())
	fmt.Fprintf(w, "device     none: %s\n", reason)
	return nil
}

// printConfig writes the configuration in effect, one knob a line with its
// value and where the value came from.
func printConfig(w io.Writer, cfg config.Config) {
	fmt.Fprintln(w, "configuration")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  variable\tvalue\tsource")
	for _, k := range config.Keys() {
		v, _ := cfg.Value(k.File)
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.Env, v, cfg.Source(k.File))
	}
	tw.Flush()
}

// moduleEntries counts the kernel entry points of an embedded module, as
// "N entries" padded to one width.
func moduleEntries(module string) (string, error) {
	entries, err := ptx.ModuleEntries(module)
	if err != nil {
		return "", fmt.Errorf("pagedkv info: embedded module %s: %w", module, err)
	}
	if len(entries) == 1 {
		return " 1 entry  ", nil
	}
	return fmt.Sprintf("%2d entries", len(entries)), nil
}

// nameWidth is the length of the longest name, to align a column of them.
func nameWidth(names []string) int {
	width := 0
	for _, n := range names {
		width = max(width, len(n))
	}
	return width
}
