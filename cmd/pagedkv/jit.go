package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/ptx"
	"github.com/pagedkv/pagedkv/ptx/ptxfile"
)

// jitRecordOptions are pagedkv jit-record's flags, checked.
type jitRecordOptions struct {
	Out    string
	Device int
	// Modules are the modules to record; empty means those whose SASS runs
	// slower than the JIT's code on the device (jitRecordModules).
	Modules       []string
	Compare       bool
	AllowMismatch bool
}

// jitRecordSynopsis is pagedkv jit-record -h's text above the flags.
const jitRecordSynopsis = `pagedkv jit-record -out DIR [flags]

Records the driver JIT's machine code for the modules whose embedded SASS is
slower than the JIT's, for this GPU's architecture. The driver's JIT compiles
each such module's embedded PTX for this GPU (through its linker, cuLink),
and the code is written to DIR as <module>.sm_XX.jit.cubin.gz, beside
DIR/jit.json: the embedded ptx/jit.json with these images added (an older
image of the same module and architecture replaced). With -compare (the
default) each module's PTX is also loaded the way a plain load JIT-compiles
it, and the recorded code must use the same registers, local memory and
shared memory in every kernel. Nothing is written when anything fails.

Copy DIR/* into ptx/, run go test ./ptx/ and commit: PAGEDKV_LOAD_SASS=auto
(the default) then loads the recorded code on GPUs of this architecture whose
driver is at least as new as this one, without the JIT's load time (older
drivers load the SASS). A module's PTX changing makes go test ./ptx/ fail
until its code is recorded again.`

// parseJITRecord parses and checks pagedkv jit-record's arguments (after
// "jit-record") without touching a device. Errors are a *usageError or a
// *helpRequest.
func parseJITRecord(args []string) (jitRecordOptions, error) {
	fs := newFlagSet("jit-record", jitRecordSynopsis)
	out := fs.String("out", "", "folder to write the cubins and jit.json into, made if missing (required)")
	device := fs.Int("device", 0, "CUDA device ordinal")
	modules := fs.String("modules", "", "comma-separated modules to record instead of those whose SASS is slower than the JIT's code on this GPU")
	compare := fs.Bool("compare", true, "also JIT-load each module's PTX and require the same per-kernel registers, local and shared memory (about doubles the time)")
	allow := fs.Bool("allow-mismatch", false, "write the recorded code even where -compare finds other resources (each is printed)")
	if err := parseFlags(fs, args); err != nil {
		return jitRecordOptions{}, err
	}
	o := jitRecordOptions{Out: *out, Device: *device, Compare: *compare, AllowMismatch: *allow}
	if o.Out == "" {
		return jitRecordOptions{}, usagef("jit-record", "-out is required; allowed: a folder to write into, e.g. -out $OUT/jit")
	}
	if st, err := os.Stat(o.Out); err == nil && !st.IsDir() {
		return jitRecordOptions{}, usagef("jit-record", "-out=%q is not allowed; allowed: a folder, and this is a file", o.Out)
	}
	if *modules != "" {
		known := ptx.Modules()
		for _, m := range strings.Split(*modules, ",") {
			m = strings.TrimSpace(m)
			if !slices.Contains(known, m) {
				return jitRecordOptions{}, usagef("jit-record", "-modules: %q is not an embedded module; allowed: %s", m, strings.Join(known, ", "))
			}
			if !slices.Contains(o.Modules, m) {
				o.Modules = append(o.Modules, m)
			}
		}
	}
	if err := checkDevice("jit-record", o.Device); err != nil {
		return jitRecordOptions{}, err
	}
	return o, nil
}

// jitRecordModules returns the embedded modules whose SASS for a device of
// compute capability cc (the cubin ptx.SASS picks) runs slower than the
// driver's JIT code (ptx.JITFaster): the modules worth recording there.
func jitRecordModules(cc int) []string {
	var mods []string
	for _, m := range ptx.Modules() {
		if ptx.ModuleComputeCapability(m) > cc {
			continue
		}
		if _, arch, ok := ptx.SASS(m, cc); ok && ptx.JITFaster(m, arch) {
			mods = append(mods, m)
		}
	}
	return mods
}

// kernelResources are what the driver reports of one loaded kernel's code.
type kernelResources struct {
	Regs, LocalBytes, SharedBytes, ConstBytes, MaxThreads int
}

// jitRecording is one module's recorded JIT code and what was measured of it.
type jitRecording struct {
	image ptx.JITImage
	cubin []byte
	log   string        // the JIT's info log
	link  time.Duration // how long the JIT took
	// recorded, loaded and sass are the kernels' resources in the recorded
	// cubin, in the module's PTX as a plain load JIT-compiles it (nil
	// without -compare) and in its ptxas SASS (nil when there is none).
	recorded, loaded, sass map[string]kernelResources
}

// runJITRecord records the JIT code of the chosen modules on the device
// (see jitRecordSynopsis) and writes it into the -out folder.
func runJITRecord(args []string) error {
	o, err := parseJITRecord(args)
	if err != nil {
		return err
	}
	n, err := driver.DeviceCount()
	if err != nil {
		return err
	}
	if o.Device >= n {
		return fmt.Errorf("pagedkv jit-record: -device=%d is out of range; this machine has devices 0..%d", o.Device, n-1)
	}
	dev, err := driver.DeviceGet(o.Device)
	if err != nil {
		return err
	}
	name, err := dev.Name()
	if err != nil {
		return err
	}
	major, err := dev.Attribute(driver.AttrComputeCapabilityMajor)
	if err != nil {
		return err
	}
	minor, err := dev.Attribute(driver.AttrComputeCapabilityMinor)
	if err != nil {
		return err
	}
	cc := major*10 + minor
	version, err := driver.DriverVersion()
	if err != nil {
		return err
	}
	modules := o.Modules
	if len(modules) == 0 {
		if modules = jitRecordModules(cc); len(modules) == 0 {
			return fmt.Errorf("pagedkv jit-record: no embedded module's SASS runs slower than the driver's JIT code on sm_%d (ptx.JITFaster), "+
				"so there is nothing to record on %s; -modules names modules to record anyway", cc, name)
		}
	}
	for _, m := range modules {
		if need := ptx.ModuleComputeCapability(m); need > cc {
			return fmt.Errorf("pagedkv jit-record: module %s needs compute capability %d.%d; device %d (%s) has %d.%d",
				m, need/10, need%10, o.Device, name, major, minor)
		}
	}
	ctx, err := dev.PrimaryCtxRetain()
	if err != nil {
		return err
	}
	defer dev.PrimaryCtxRelease()

	fmt.Printf("pagedkv jit-record: %s (sm_%d), driver %d (CUDA %d.%d), %d modules; build %s\n",
		name, cc, version, version/1000, version%1000/10, len(modules), buildStamp())
	width := nameWidth(modules)
	var recs []jitRecording
	var mismatches []string
	for _, m := range modules {
		rec, err := recordModule(ctx, m, cc, version, name, o.Compare)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
		diffs := resourceMismatches(m, rec.recorded, rec.loaded)
		mismatches = append(mismatches, diffs...)
		compared := ""
		switch {
		case !o.Compare:
		case len(diffs) == 0:
			compared = "  same resources as the PTX load"
		default:
			compared = fmt.Sprintf("  %d kernels DIFFER from the PTX load", len(diffs))
		}
		fmt.Printf("  %-*s  JIT %6.2f s  %8d bytes  regs %s (ptxas SASS %s)%s\n",
			width, m, rec.link.Seconds(), rec.image.Size, regsRange(rec.recorded), regsRange(rec.sass), compared)
		if rec.log != "" {
			fmt.Printf("    JIT log: %s\n", strings.ReplaceAll(rec.log, "\n", "\n    "))
		}
	}
	if len(mismatches) > 0 {
		fmt.Println("\nthe recorded code's kernels differ from the PTX load's:")
		for _, d := range mismatches {
			fmt.Println("  " + d)
		}
		if !o.AllowMismatch {
			return fmt.Errorf("pagedkv jit-record: the driver's linker made other code than a plain load of the PTX for %d kernels (above); "+
				"nothing written (-allow-mismatch writes it anyway; bench it before committing)", len(mismatches))
		}
	}

	embedded, err := ptx.ReadJITRecord()
	if err != nil {
		return err
	}
	images := make([]ptx.JITImage, len(recs))
	for i, rec := range recs {
		images[i] = rec.image
	}
	if err := writeJITRecord(o.Out, recs, mergeJITRecord(embedded, images)); err != nil {
		return err
	}
	fragment, err := ptx.JITRecord{Images: images}.Marshal()
	if err != nil {
		return err
	}
	fmt.Printf("\nwrote %d cubins and jit.json to %s; recorded:\n%s", len(recs), o.Out, fragment)
	fmt.Printf("\nnext: cp %s/* ptx/ && go test ./ptx/ && git add ptx/jit.json ptx/*.jit.cubin.gz\n", o.Out)
	return nil
}

// recordModule has the driver's JIT compile module's embedded PTX for the
// device of ctx and measures the code: its kernels' resources, and with
// compare those of a plain load of the PTX; also those of the module's
// ptxas SASS, for the printout.
func recordModule(ctx driver.Context, module string, cc, driverVersion int, device string, compare bool) (jitRecording, error) {
	text, err := ptx.Module(module)
	if err != nil {
		return jitRecording{}, err
	}
	entries, err := ptx.ModuleEntries(module)
	if err != nil {
		return jitRecording{}, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name
	}
	var rec jitRecording
	err = ctx.Do(func() error {
		start := time.Now()
		var err error
		if rec.cubin, rec.log, err = driver.LinkPTX(text, module+".ptx"); err != nil {
			return err
		}
		rec.link = time.Since(start)
		if rec.recorded, err = imageResources(rec.cubin, names); err != nil {
			return fmt.Errorf("the recorded cubin does not load: %w", err)
		}
		if sass, _, ok := ptx.SASS(module, cc); ok {
			if rec.sass, err = imageResources(sass, names); err != nil {
				return fmt.Errorf("its SASS does not load: %w", err)
			}
		}
		if compare {
			if rec.loaded, err = imageResources(text, names); err != nil {
				return fmt.Errorf("its PTX does not load: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return jitRecording{}, fmt.Errorf("pagedkv jit-record: module %s: %w", module, err)
	}
	rec.image = ptx.JITImage{
		Module:        module,
		Arch:          fmt.Sprintf("sm_%d", cc),
		Device:        device,
		DriverVersion: driverVersion,
		PTXSHA256:     sha256Hex(text),
		SHA256:        sha256Hex(rec.cubin),
		Size:          int64(len(rec.cubin)),
	}
	return rec, nil
}

// imageResources loads image into the current context, reads the
// resources of each kernel in entries and unloads it.
func imageResources(image []byte, entries []string) (map[string]kernelResources, error) {
	mod, err := driver.LoadModule(image)
	if err != nil {
		return nil, err
	}
	out := make(map[string]kernelResources, len(entries))
	for _, e := range entries {
		f, err := mod.Function(e)
		if err != nil {
			return nil, errors.Join(err, mod.Unload())
		}
		var k kernelResources
		for _, a := range []struct {
			attr driver.FunctionAttribute
			dst  *int
		}{
			{driver.FuncAttrNumRegs, &k.Regs},
			{driver.FuncAttrLocalSizeBytes, &k.LocalBytes},
			{driver.FuncAttrSharedSizeBytes, &k.SharedBytes},
			{driver.FuncAttrConstSizeBytes, &k.ConstBytes},
			{driver.FuncAttrMaxThreadsPerBlock, &k.MaxThreads},
		} {
			if *a.dst, err = f.Attribute(a.attr); err != nil {
				return nil, errors.Join(fmt.Errorf("kernel %s: %w", e, err), mod.Unload())
			}
		}
		out[e] = k
	}
	return out, mod.Unload()
}

// resourceMismatches returns one line per kernel of module whose resources
// in the recorded code differ from those of the plain PTX load (none when
// loaded is nil: not compared).
func resourceMismatches(module string, recorded, loaded map[string]kernelResources) []string {
	if loaded == nil {
		return nil
	}
	var out []string
	for _, e := range slices.Sorted(maps.Keys(loaded)) {
		r, ok := recorded[e]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: %s is missing from the recorded code", module, e))
		case r != loaded[e]:
			out = append(out, fmt.Sprintf("%s: %s: recorded %+v, PTX load %+v", module, e, r, loaded[e]))
		}
	}
	return out
}

// regsRange returns the smallest and largest register count of kernels as
// "109-119", one number when they agree, "-" when there are none.
func regsRange(kernels map[string]kernelResources) string {
	if len(kernels) == 0 {
		return "-"
	}
	lo, hi := -1, 0
	for _, k := range kernels {
		if lo < 0 || k.Regs < lo {
			lo = k.Regs
		}
		hi = max(hi, k.Regs)
	}
	if lo == hi {
		return fmt.Sprint(lo)
	}
	return fmt.Sprintf("%d-%d", lo, hi)
}

// mergeJITRecord returns old with images added, each replacing an image of
// old for the same module and architecture; old is left as it was.
func mergeJITRecord(old ptx.JITRecord, images []ptx.JITImage) ptx.JITRecord {
	var merged ptx.JITRecord
	for _, img := range old.Images {
		replaced := slices.ContainsFunc(images, func(n ptx.JITImage) bool { return n.Module == img.Module && n.Arch == img.Arch })
		if !replaced {
			merged.Images = append(merged.Images, img)
		}
	}
	merged.Images = append(merged.Images, images...)
	return merged
}

// writeJITRecord writes each recording's cubin, gzip-compressed as ptx/
// stores it, and rec as jit.json into dir, which it makes if missing.
func writeJITRecord(dir string, recs []jitRecording, rec ptx.JITRecord) error {
	data, err := rec.Marshal()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, r := range recs {
		gz, err := ptxfile.CompressCubin(r.cubin)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, ptxfile.JITCubinFile(r.image.Module, r.image.Arch)), gz, 0o644); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, ptxfile.JITFile), data, 0o644)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
