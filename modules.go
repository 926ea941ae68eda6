package pagedkv

import (
	"fmt"
	"maps"
	"sort"
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

// LoadModule loads one embedded module (if not yet loaded): its machine code
// for this GPU when LOAD_SASS asks for it and one is embedded (falling back to
// the PTX if the driver refuses it), else its PTX, which the driver
// JIT-compiles. It resolves the entry points and records their occupancy
// for the planner, and returns how long the load took (zero when it was
// already loaded; ModuleImage says what was loaded). Errors carry the
// driver's JIT log. A module whose PTX needs a higher compute capability than
// the device has (the *_sm90 modules on Ampere or Ada) is an error matching
// ErrComputeCapability, returned without asking the driver.
func (r *Runtime) LoadModule(name string) (time.Duration, error) {
	if err := r.live(); err != nil {
		return 0, err
	}
	if err := checkComputeCapability(name, ptx.ModuleComputeCapability(name), r.info); err != nil {
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
	load := moduleLoad{image: "ptx"}
	var funcs map[string]driver.Function
	var facts moduleFacts
	var err error
	// The module's machine code for this GPU, where LOAD_SASS asks for it
	// and one is embedded; a driver that refuses it gets the PTX.
	if sass, arch, ok := r.sass(name); ok {
		load.module, funcs, facts, err = r.loadImage(name, sass, entries)
		if err == nil {
			load.image = fmt.Sprintf("sass sm_%d", arch)
		} else {
			if load.module != 0 {
				_ = r.do(load.module.Unload)
				load.module = 0
			}
			load.sassErr = err
		}
	}
	if load.module == 0 {
		image, err := ptx.Module(name)
		if err != nil {
			return 0, err
		}
		load.module, funcs, facts, err = r.loadImage(name, image, entries)
		if err != nil {
			if load.module != 0 {
				_ = r.do(load.module.Unload)
			}
			return time.Since(start), err
		}
	}
	elapsed := time.Since(start)
	load.duration = elapsed
	r.mu.Lock()
	r.modules[name] = load
	maps.Copy(r.funcs, funcs)
	r.facts.Store(facts.addTo(r.facts.Load()))
	r.mu.Unlock()
	return elapsed, nil
}

// sass returns module's embedded machine code for this GPU and its
// architecture when LOAD_SASS asks for it and there is one (see ptx.SASS):
// auto skips the modules whose SASS is slower than the JIT's code on this
// architecture (ptx.JITFaster), on takes every one, off none.
func (r *Runtime) sass(module string) ([]byte, int, bool) {
	if r.cfg.LoadSASS == config.SplitOff {
		return nil, 0, false
	}
	image, arch, ok := ptx.SASS(module, r.info.computeCapability())
	if ok && r.cfg.LoadSASS == config.SplitAuto && ptx.JITFaster(module, arch) {
		return nil, 0, false
	}
	return image, arch, ok
}

// ModuleImage reports what was loaded for module name: "ptx" or "sass
// sm_XX", and, when LOAD_SASS asked for its SASS but the driver refused it
// and the PTX was loaded instead, why. ok is false when the module is not
// loaded.
func (r *Runtime) ModuleImage(name string) (image string, sassErr error, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	m, ok := r.modules[name]
	return m.image, m.sassErr, ok
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

// loadImage JIT-loads image, the PTX of module name, resolves entries in
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

// canLoad reports whether the device's compute capability is enough for the
// embedded module (see ptx.ModuleComputeCapability): false for the *_sm90
// modules below 9.0. Planners use it to leave out kernels the device cannot
// run; it says nothing of whether the module exists.
func (r *Runtime) canLoad(module string) bool {
	return ptx.ModuleComputeCapability(module) <= r.info.computeCapability()
}

// checkComputeCapability returns an error matching ErrComputeCapability,
// naming the module, what it needs and what the device has, when the device
// described by d is below need, the capability module needs.
func checkComputeCapability(module string, need int, d DeviceInfo) error {
	if need <= d.computeCapability() {
		return nil
	}
	return fmt.Errorf("%w: %s needs compute capability %d.%d; device %d (%s) has %d.%d",
		ErrComputeCapability, module, need/10, need%10, d.Ordinal, d.Name, d.ComputeMajor, d.ComputeMinor)
}

// Occupancy reports the resident blocks per SM of a loaded kernel (0 if it
// is not loaded), as the planner sees it.
func (r *Runtime) Occupancy(kernel string) int { return r.facts.Load().Occupancy[kernel] }

// Facts returns the device facts the planner uses.
func (r *Runtime) Facts() dispatch.DeviceFacts { return *r.facts.Load() }

// KernelAttributes reports register count, local (spill) bytes and static
// shared bytes of a kernel, loading its module if needed.
func (r *Runtime) KernelAttributes(name string) (regs, localBytes, sharedBytes int, err error) {
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

// Modules lists the embedded modules, including those that need a newer GPU
// than some supported ones (LoadModule then fails with ErrComputeCapability).
func Modules() []string { return ptx.Modules() }
