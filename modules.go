package pagedkv

import (
	"errors"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/ptx"
)

// entryModule maps every embedded kernel entry point to its module, from the
// embedded manifest.
var entryModule = func() map[string]string {
	m, err := ptx.ReadManifest()
	if err != nil {
		panic("pagedkv: embedded ptx/manifest.json is unreadable: " + err.Error())
	}
	out := map[string]string{}
	for _, mod := range m.Modules {
		for _, e := range mod.Entries {
			out[e] = mod.Name
		}
	}
	return out
}()

// function returns the loaded kernel entry point name, loading its module on
// first use. The second result is true when this call loaded the module (so
// the device facts changed).
func (r *Runtime) function(name string) (driver.Function, bool, error) {
	r.mu.RLock()
	f, ok := r.funcs[name]
	r.mu.RUnlock()
	if ok {
		return f, false, nil
	}
	mod, ok := entryModule[name]
	if !ok {
		return 0, false, fmt.Errorf("pagedkv: kernel %q is not in the embedded PTX (stale ptx/? run go run ./cmd/ptxgen)", name)
	}
	if _, err := r.LoadModule(mod); err != nil {
		return 0, false, err
	}
	r.mu.RLock()
	f, ok = r.funcs[name]
	r.mu.RUnlock()
	if !ok {
		return 0, false, fmt.Errorf("pagedkv: module %s loaded but has no entry %q", mod, name)
	}
	return f, true, nil
}

// LoadModule loads one embedded module (if not yet loaded), in the order
// planImages gives for LOAD_SASS and what is embedded: by default the
// driver JIT's own machine code recorded for this GPU's architecture
// (ptx.JITCubin) where the running driver is at least as new as the one that
// recorded it, else ptxas's machine code (ptx.SASS), else the PTX, which the
// driver JIT-compiles; an image the driver refuses falls back to the next.
// It resolves the entry points and records their occupancy for the planner,
// and returns how long the load took (zero when it was already loaded;
// ModuleImage says what was loaded and why). Errors carry the driver's JIT
// log. A module that does not run on the device (ptx.ModuleRunsOn: the
// *_sm90 modules on Ampere or Ada, the arch-specific *_sm90a modules
// anywhere but on compute capability 9.0) is an error matching
// ErrComputeCapability, returned without asking the driver.
func (r *Runtime) LoadModule(name string) (time.Duration, error) {
	if err := r.live(); err != nil {
		return 0, err
	}
	if err := checkComputeCapability(name, r.info, ptx.ModuleRunsOn); err != nil {
		return 0, err
	}
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	r.mu.RLock()
	_, done := r.modules[name]
	r.mu.RUnlock()
	if done {
		return 0, nil
	}
	entries := moduleEntries(name)
	start := time.Now()
	choice, sass, jit := r.imageChoice(name)
	var (
		loaded  loadedModule
		funcs   map[string]driver.Function
		facts   moduleFacts
		refused []error
	)
	for _, c := range planImages(choice) {
		image := sass
		switch c.kind {
		case imageJIT:
			image = jit
		case imagePTX:
			var err error
			if image, err = ptx.Module(name); err != nil {
				return 0, err
			}
		}
		mod, f, mf, err := r.loadImage(name, image, entries)
		if err == nil {
			loaded = loadedModule{module: mod, image: ModuleImage{Image: c.label(), Reason: c.why, Refused: errors.Join(refused...)}}
			funcs, facts = f, mf
			break
		}
		if mod != 0 {
			_ = r.do(mod.Unload)
		}
		if c.kind == imagePTX {
			return time.Since(start), errors.Join(append([]error{err}, refused...)...)
		}
		refused = append(refused, fmt.Errorf("%s: %w", c.label(), err))
	}
	elapsed := time.Since(start)
	loaded.image.LoadTime = elapsed
	r.mu.Lock()
	r.modules[name] = loaded
	maps.Copy(r.funcs, funcs)
	r.facts.Store(facts.addTo(r.facts.Load()))
	r.mu.Unlock()
	return elapsed, nil
}

// imageChoice returns what planImages decides from for the embedded module
// name on this device, with the cubins it may load: ptxas's SASS (nil
// unless LOAD_SASS is auto or on and one runs here) and the recorded JIT
// code (nil unless LOAD_SASS is auto and some is recorded for the device's
// architecture).
func (r *Runtime) imageChoice(name string) (c imageChoice, sass, jit []byte) {
	c = imageChoice{mode: r.cfg.LoadSASS, cc: r.info.computeCapability(), driver: r.info.DriverVersion,
		archSpecific: ptx.ModuleArchSpecific(name)}
	if c.mode != config.SplitOff {
		sass, c.sassArch, _ = ptx.SASS(name, c.cc)
		c.jitFaster = c.sassArch > 0 && ptx.JITFaster(name, c.sassArch)
	}
	if c.mode != config.SplitOff && c.mode != config.SplitOn { // auto
		jit, c.jitDriver, _ = ptx.JITCubin(name, c.cc)
	}
	return c, sass, jit
}

// imageKind is a kind of image a module can load from.
type imageKind int

const (
	// imageJIT is the machine code the driver's JIT made of the module's
	// PTX on a GPU of the device's architecture, harvested from its JIT
	// cache (ptx.JITCubin).
	imageJIT imageKind = iota
	// imageSASS is the machine code ptxas assembled from the module's PTX
	// (ptx.SASS).
	imageSASS
	// imagePTX is the PTX, which the driver JIT-compiles at load.
	imagePTX
)

// imageChoice is what planImages decides from, for one module on one
// device.
type imageChoice struct {
	mode   config.SplitMode // LOAD_SASS
	cc     int              // the device's compute capability, major*10+minor
	driver int              // the running driver's version (cuDriverGetVersion)
	// sassArch is the architecture of the module's ptxas SASS the device
	// runs (ptx.SASS); 0 when there is none.
	sassArch int
	// jitFaster is ptx.JITFaster for the module at sassArch: its SASS runs
	// slower than the driver's JIT code.
	jitFaster bool
	// jitDriver is the version of the driver that recorded the module's JIT
	// code for exactly cc (ptx.JITCubin); 0 when none is recorded.
	jitDriver int
	// archSpecific is ptx.ModuleArchSpecific for the module: its SASS is
	// for sm_XXa (the label says so).
	archSpecific bool
}

// imageCandidate is one image a load tries, and why it is tried.
type imageCandidate struct {
	kind imageKind
	arch int // the cubin's architecture (e.g. 90); 0 for the PTX
	// archSpecific marks ptxas's SASS of an arch-specific module (sm_90a).
	archSpecific bool
	why          string
}

// label names the image: "jit-cubin sm_90", "sass sm_90", "sass sm_90a" or
// "ptx".
func (c imageCandidate) label() string {
	switch c.kind {
	case imageJIT:
		return fmt.Sprintf("jit-cubin sm_%d", c.arch)
	case imageSASS:
		if c.archSpecific {
			return fmt.Sprintf("sass sm_%da", c.arch)
		}
		return fmt.Sprintf("sass sm_%d", c.arch)
	}
	return "ptx"
}

// planImages returns the images a module loads from, in the order to try
// them (a driver that refuses one gets the next), the PTX always last, each
// with the reason it is tried:
//
//   - LOAD_SASS=0: the PTX only.
//   - LOAD_SASS=1: ptxas's SASS where the device runs one, then the PTX.
//   - auto: the recorded JIT code (the driver's own code, without the
//     JIT's load time) where it is recorded for the device's architecture
//     and the running driver is at least as new as the recording one (an
//     older driver may not load a newer one's cubin); then ptxas's SASS,
//     then the PTX. A module whose SASS runs slower than the JIT's code
//     (jitFaster) with no JIT code recorded loads its PTX, paying the JIT
//     at load for the faster code; with JIT code recorded for a newer
//     driver it loads its SASS (fast to load, slower to run) rather than
//     stalling on the JIT, and the PTX only if the driver refuses that.
func planImages(c imageChoice) []imageCandidate {
	var out []imageCandidate
	// first adds the first image to try; then adds one tried when every
	// image before it was refused.
	first := func(kind imageKind, arch int, why string) {
		out = []imageCandidate{{kind: kind, arch: arch, archSpecific: kind == imageSASS && c.archSpecific, why: why}}
	}
	then := func(kind imageKind, arch int) {
		tried := make([]string, len(out))
		for i, prev := range out {
			tried[i] = prev.label()
		}
		out = append(out, imageCandidate{kind: kind, arch: arch, archSpecific: kind == imageSASS && c.archSpecific,
			why: "the driver refused the " + strings.Join(tried, " and the ")})
	}
	sm := fmt.Sprintf("sm_%d", c.cc)
	switch c.mode {
	case config.SplitOff:
		first(imagePTX, 0, "PAGEDKV_LOAD_SASS=0")
		return out
	case config.SplitOn:
		if c.sassArch == 0 {
			first(imagePTX, 0, "no SASS for "+sm)
			return out
		}
		first(imageSASS, c.sassArch, "PAGEDKV_LOAD_SASS=1")
		then(imagePTX, 0)
		return out
	}
	recorded := c.jitDriver > 0
	if recorded && c.driver >= c.jitDriver {
		first(imageJIT, c.cc, fmt.Sprintf("driver %d recorded, %d running", c.jitDriver, c.driver))
		if c.sassArch > 0 {
			then(imageSASS, c.sassArch)
		}
		then(imagePTX, 0)
		return out
	}
	tooOld := fmt.Sprintf("recorded JIT code needs driver ≥ %d, running %d", c.jitDriver, c.driver)
	switch {
	case c.sassArch == 0 && recorded:
		first(imagePTX, 0, "no SASS for "+sm+"; "+tooOld)
	case c.sassArch == 0:
		first(imagePTX, 0, "no SASS for "+sm)
	case c.jitFaster && !recorded:
		first(imagePTX, 0, fmt.Sprintf("its sm_%d SASS runs slower than the driver's JIT code, and no JIT code is recorded for %s", c.sassArch, sm))
	case recorded:
		first(imageSASS, c.sassArch, tooOld)
		then(imagePTX, 0)
	default:
		first(imageSASS, c.sassArch, "PAGEDKV_LOAD_SASS=auto")
		then(imagePTX, 0)
	}
	return out
}

// ModuleImage says which image of an embedded module a Runtime loaded, why
// and how long the load took.
type ModuleImage struct {
	// Image is what loaded: "jit-cubin sm_XX" (the driver JIT's machine
	// code recorded in ptx/jit.json), "sass sm_XX" (ptxas's machine
	// code) or "ptx" (JIT-compiled by the driver at load).
	Image string
	// Reason says why that image, e.g. "driver 13000 recorded, 13000
	// running" or "recorded JIT code needs driver ≥ 13000, running 12080".
	Reason string
	// LoadTime is how long the load took, resolving the entry points and
	// measuring their occupancy included.
	LoadTime time.Duration
	// Refused holds why the driver refused each image tried before Image,
	// joined; nil when the first image tried loaded.
	Refused error
}

// String returns the image and the reason, e.g. "sass sm_90
// (PAGEDKV_LOAD_SASS=auto)".
func (m ModuleImage) String() string { return m.Image + " (" + m.Reason + ")" }

// ModuleImage reports which image was loaded for module name and why; ok is
// false when the module is not loaded.
func (r *Runtime) ModuleImage(name string) (image ModuleImage, ok bool) {
	if r == nil {
		return ModuleImage{}, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.modules[name]
	return m.image, ok
}

// moduleEntries returns the entry points of the embedded module name, sorted.
func moduleEntries(name string) []string {
	var entries []string
	for e, m := range entryModule {
		if m == name {
			entries = append(entries, e)
		}
	}
	sort.Strings(entries)
	return entries
}

// loadImage loads image, a cubin or the PTX of module name, resolves entries in
// it and measures each for the planner (moduleFacts.measure) as it is
// resolved. It records nothing in r. On an error after the driver loaded the
// image, mod is that module, for the caller to unload.
func (r *Runtime) loadImage(name string, image []byte, entries []string) (mod driver.Module, funcs map[string]driver.Function, facts moduleFacts, err error) {
	funcs = map[string]driver.Function{}
	facts = moduleFacts{occupancy: map[string]int{}, shallow: map[string]int{}, clusters: map[string][]int{}}
	err = r.do(func() error {
		var err error
		if mod, err = driver.LoadModule(image); err != nil {
			return fmt.Errorf("pagedkv: loading module %s on %s: %w", name, r.info.Name, err)
		}
		for _, e := range entries {
			f, err := mod.Function(e)
			if err != nil {
				return fmt.Errorf("pagedkv: module %s: %w", name, err)
			}
			funcs[e] = f
			if err := facts.measure(name, e, f, r.info.MaxSharedPerBlockOptin); err != nil {
				return err
			}
		}
		return nil
	})
	return mod, funcs, facts, err
}

// moduleFacts is what the planner learns of the kernels of one module when
// it loads: per kernel, the fields of dispatch.DeviceFacts of the same names.
type moduleFacts struct {
	occupancy map[string]int   // Occupancy
	shallow   map[string]int   // ShallowOccupancy, decode kernels only
	clusters  map[string][]int // ActiveClusters, cluster decode kernels only
}

// measure records the facts of kernel e of module (function f) on a device
// whose blocks may opt in to maxShared bytes of dynamic shared memory. It
// also opts a decode kernel in to the deepest ring the device holds, before
// its occupancy is measured. It runs with the context current.
func (m *moduleFacts) measure(module, e string, f driver.Function, maxShared int) error {
	block, err := f.Attribute(driver.FuncAttrMaxThreadsPerBlock)
	if err != nil {
		return err
	}
	// Kernels with more dynamic shared memory than the default 48 KiB opt
	// in; one this device cannot hold gets occupancy 0 and the planner
	// refuses it by name.
	shared := dispatch.KernelSharedBytes(e, maxShared)
	if shared > maxShared {
		m.occupancy[e] = 0
		return nil
	}
	// A decode kernel opts in to its deepest ring the device holds, so that
	// a plan may carry another depth (DecodeWithPlan).
	if limit := dispatch.DecodeSharedLimit(e, maxShared); limit > 48<<10 {
		if err := f.SetAttribute(driver.FuncAttrMaxDynamicSharedSizeBytes, limit); err != nil {
			return fmt.Errorf("pagedkv: module %s: %s: %w", module, e, err)
		}
	}
	// Every pagedkv kernel is launched with its __launch_bounds__ block
	// size, which is what the driver reports as the maximum, except
	// qkv_norm_rope, whose block and shared memory follow the shape (at most
	// that size and KernelSharedBytes; see dispatch.PlanQKV): its figure is
	// for the largest of both.
	n, err := f.MaxActiveBlocksPerSM(block, shared)
	if err != nil {
		return err
	}
	m.occupancy[e] = n
	// A decode kernel: also its blocks per SM with the one-wave ring, which
	// the planner gives short blocks when it packs more.
	if sh := dispatch.DecodeOneWaveSharedBytes(e, maxShared); sh > 0 {
		if m.shallow[e], err = f.MaxActiveBlocksPerSM(block, sh); err != nil {
			return err
		}
	}
	// A cluster decode kernel: how many clusters of each size fit at once
	// (one wave), for the planner's split choice. A size the driver cannot
	// place (or a failed query) counts as none, which keeps the planner on
	// the global-memory merge.
	if dispatch.IsClusterKernel(e) {
		waves := make([]int, dispatch.MaxClusterSplits+1)
		for size := 1; size <= dispatch.MaxClusterSplits; size++ {
			b := driver.Dim3{X: uint32(block), Y: 1, Z: 1}
			if n, err := f.MaxActiveClusters(b, driver.Dim3{X: 1, Y: 1, Z: uint32(size)}, uint32(shared)); err == nil {
				waves[size] = n
			}
		}
		m.clusters[e] = waves
	}
	return nil
}

// addTo returns old with m's facts added, as a new value: old and its maps
// are left as they are, for the plans being made from them.
func (m moduleFacts) addTo(old *dispatch.DeviceFacts) *dispatch.DeviceFacts {
	facts := *old
	facts.Occupancy = maps.Clone(old.Occupancy)
	maps.Copy(facts.Occupancy, m.occupancy)
	facts.ShallowOccupancy = maps.Clone(old.ShallowOccupancy)
	if facts.ShallowOccupancy == nil {
		facts.ShallowOccupancy = map[string]int{}
	}
	maps.Copy(facts.ShallowOccupancy, m.shallow)
	facts.ActiveClusters = maps.Clone(old.ActiveClusters)
	if facts.ActiveClusters == nil {
		facts.ActiveClusters = map[string][]int{}
	}
	maps.Copy(facts.ActiveClusters, m.clusters)
	return &facts
}

// computeCapability is the device's compute capability as major*10+minor
// (90 for 9.0), the unit of ptx.ModuleComputeCapability.
func (d DeviceInfo) computeCapability() int { return d.ComputeMajor*10 + d.ComputeMinor }

// canLoad reports whether the embedded module runs on the device's compute
// capability (ptx.ModuleRunsOn): false for the *_sm90 modules below 9.0 and
// for the arch-specific *_sm90a modules anywhere but 9.0. Planners use it
// to leave out kernels the device cannot run; it says nothing of whether
// the module exists.
func (r *Runtime) canLoad(module string) bool {
	ok, _ := ptx.ModuleRunsOn(module, r.info.computeCapability())
	return ok
}

// checkComputeCapability returns an error matching ErrComputeCapability,
// naming the module, the device and why, when runsOn (ptx.ModuleRunsOn)
// says module does not run on the device described by d.
func checkComputeCapability(module string, d DeviceInfo, runsOn func(module string, cc int) (bool, string)) error {
	ok, reason := runsOn(module, d.computeCapability())
	if ok {
		return nil
	}
	return fmt.Errorf("%w: %s %s (device %d, %s)", ErrComputeCapability, module, reason, d.Ordinal, d.Name)
}

// Occupancy reports the resident blocks per SM of a loaded kernel (0 if it
// is not loaded), as the planner sees it.
func (r *Runtime) Occupancy(kernel string) int {
	if r == nil || r.facts.Load() == nil {
		return 0
	}
	return r.facts.Load().Occupancy[kernel]
}

// Facts returns the device facts the planner uses.
func (r *Runtime) Facts() dispatch.DeviceFacts {
	if r == nil || r.facts.Load() == nil {
		return dispatch.DeviceFacts{}
	}
	return *r.facts.Load()
}

// KernelAttributes reports register count, local (spill) bytes and static
// shared bytes of a kernel, loading its module if needed.
func (r *Runtime) KernelAttributes(name string) (regs, localBytes, sharedBytes int, err error) {
	if err := r.live(); err != nil {
		return 0, 0, 0, err
	}
	f, _, err := r.function(name)
	if err != nil {
		return 0, 0, 0, err
	}
	err = r.do(func() error {
		var err error
		if regs, err = f.Attribute(driver.FuncAttrNumRegs); err != nil {
			return err
		}
		if localBytes, err = f.Attribute(driver.FuncAttrLocalSizeBytes); err != nil {
			return err
		}
		sharedBytes, err = f.Attribute(driver.FuncAttrSharedSizeBytes)
		return err
	})
	return regs, localBytes, sharedBytes, err
}

// Modules lists the embedded modules, including those that do not run on
// some supported GPUs (LoadModule then fails with ErrComputeCapability).
func Modules() []string { return ptx.Modules() }
