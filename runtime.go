package pagedkv

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/pagedkv/pagedkv/config"
	"github.com/pagedkv/pagedkv/dispatch"
	"github.com/pagedkv/pagedkv/driver"
	"github.com/pagedkv/pagedkv/ptx"
	"github.com/pagedkv/pagedkv/scratch"
)

// ErrNoDriver means libcuda could not be loaded; ErrNoDevice means the driver
// sees no CUDA device. Match them with errors.Is.
var (
	ErrNoDriver = driver.ErrNoDriver
	ErrNoDevice = driver.ErrNoDevice
	ErrClosed   = errors.New("pagedkv: runtime is closed")
	// ErrComputeCapability means a module does not run on the device's
	// compute capability: a *_sm90 module (thread-block clusters) on an
	// Ampere or Ada GPU, or an arch-specific *_sm90a module (wgmma,
	// setmaxnreg) on any GPU but compute capability 9.0.
	ErrComputeCapability = errors.New("pagedkv: module not built for this GPU")
)

// Options selects the device and overrides configuration; nil fields keep the
// value from the environment, the config file or the default (see package
// config for the keys).
type Options struct {
	Device int
	Config config.Options
}

// Runtime runs pagedkv ops on one CUDA device. It owns the device's primary
// context (retained for its lifetime), the modules it has loaded, its streams
// and its split-K scratch pool.
//
// A Runtime is safe for concurrent use by multiple goroutines; ops on
// different streams run concurrently on the device. Open one Runtime per
// device; several may be used at the same time. Close releases everything;
// buffers and streams it created must not be used afterwards.
type Runtime struct {
	device driver.Device
	ctx    driver.Context
	cfg    config.Config
	knobs  dispatch.Knobs // decode's (knobsFrom)
	// varlenKnobs are the varlen planner's (varlenKnobsFrom).
	varlenKnobs dispatch.Knobs
	info        DeviceInfo
	scratch     *scratch.Pool // split-K partials
	// counters holds the split-K counters of the fused merge, per stream:
	// zeroed when allocated, left zero by every kernel, never shared with
	// partials (whose bytes would be garbage counters).
	counters *scratch.Pool
	stream   *Stream

	facts atomic.Pointer[dispatch.DeviceFacts]
	// decodePlans remembers recent decode plans (planAndLoad).
	decodePlans planMemo

	mu       sync.RWMutex // guards funcs and modules
	funcs    map[string]driver.Function
	modules  map[string]loadedModule
	loadMu   sync.Mutex // serializes module loads
	closed   atomic.Bool
	closeMu  sync.Mutex
	streamMu sync.Mutex
	streams  map[*Stream]struct{}
	cleanup  runtime.Cleanup // releases the context if Close is never called
}

// DeviceInfo describes the device a Runtime runs on.
type DeviceInfo struct {
	Ordinal                int
	Name                   string
	TotalMemBytes          uint64
	SMs                    int
	ComputeMajor           int
	ComputeMinor           int
	L2Bytes                int
	MaxSharedPerBlockOptin int
	DriverVersion          int
}

// loadedModule is one loaded embedded module and how its load went.
type loadedModule struct {
	module driver.Module
	image  ModuleImage
}

// Open initializes the driver, retains the primary context of the device in
// opts and loads the configuration. Modules are loaded lazily, on the first
// op that needs them. Errors match ErrNoDriver or ErrNoDevice when there is
// no usable GPU, ErrInvalidArgument for an Options.Device the machine does
// not have, ErrComputeCapability for a GPU older than compute capability
// 8.0, and config.ErrInvalid for a configuration value outside its allowed
// ones.
func Open(opts Options) (*Runtime, error) {
	cfg, err := config.Load(opts.Config)
	if err != nil {
		return nil, err
	}
	if err := driver.Init(); err != nil {
		return nil, err
	}
	n, err := driver.DeviceCount()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("pagedkv: %w", ErrNoDevice)
	}
	if opts.Device < 0 || opts.Device >= n {
		return nil, fmt.Errorf("%w: Options.Device=%d is out of range; this machine has devices 0..%d", ErrInvalidArgument, opts.Device, n-1)
	}
	dev, err := driver.DeviceGet(opts.Device)
	if err != nil {
		return nil, err
	}
	info, err := deviceInfo(dev, opts.Device)
	if err != nil {
		return nil, err
	}
	if info.ComputeMajor < 8 {
		return nil, fmt.Errorf("%w: device %d (%s) has compute capability %d.%d; pagedkv needs 8.0 or newer (Ampere, Ada, Hopper, Blackwell)",
			ErrComputeCapability, opts.Device, info.Name, info.ComputeMajor, info.ComputeMinor)
	}
	ctx, err := dev.PrimaryCtxRetain()
	if err != nil {
		return nil, err
	}
	// The cluster decode kernels live in the *_sm90 modules, the wgmma
	// varlen kernels in the arch-specific *_sm90a ones.
	clusters, _ := ptx.ModuleRunsOn(ptx.ModuleDecodeF16Sm90, info.computeCapability())
	wgmma, _ := ptx.ModuleRunsOn(ptx.ModuleVarlenBf16Sm90a, info.computeCapability())
	r := &Runtime{
		device:      dev,
		ctx:         ctx,
		cfg:         cfg,
		knobs:       knobsFrom(cfg),
		varlenKnobs: varlenKnobsFrom(cfg),
		info:        info,
		funcs:       map[string]driver.Function{},
		modules:     map[string]loadedModule{},
		streams:     map[*Stream]struct{}{},
	}
	r.facts.Store(&dispatch.DeviceFacts{
		Name:                   info.Name,
		SMs:                    info.SMs,
		MaxSharedPerBlockOptin: info.MaxSharedPerBlockOptin,
		Clusters:               clusters,
		WGMMA:                  wgmma,
		Occupancy:              map[string]int{},
	})
	r.scratch = scratch.New(scratchAllocator{r: r}, cfg.ScratchLimitBytes)
	r.counters = scratch.New(scratchAllocator{r: r, zero: true}, 0)
	if r.stream, err = r.NewStream(); err != nil {
		_ = dev.PrimaryCtxRelease()
		return nil, err
	}
	r.cleanup = runtime.AddCleanup(r, func(dev driver.Device) { _ = dev.PrimaryCtxRelease() }, dev)
	return r, nil
}

func deviceInfo(dev driver.Device, ordinal int) (DeviceInfo, error) {
	info := DeviceInfo{Ordinal: ordinal}
	var err error
	if info.Name, err = dev.Name(); err != nil {
		return info, err
	}
	if info.TotalMemBytes, err = dev.TotalMem(); err != nil {
		return info, err
	}
	if info.DriverVersion, err = driver.DriverVersion(); err != nil {
		return info, err
	}
	for _, a := range []struct {
		attr driver.DeviceAttribute
		dst  *int
	}{
		{driver.AttrMultiprocessorCount, &info.SMs},
		{driver.AttrComputeCapabilityMajor, &info.ComputeMajor},
		{driver.AttrComputeCapabilityMinor, &info.ComputeMinor},
		{driver.AttrL2CacheSize, &info.L2Bytes},
		{driver.AttrMaxSharedMemoryPerBlockOptin, &info.MaxSharedPerBlockOptin},
	} {
		if *a.dst, err = dev.Attribute(a.attr); err != nil {
			return info, err
		}
	}
	return info, nil
}

// knobsFrom returns the decode planner's knobs of c. PAGED_FLASH and
// PAGED_FLASH_SPLITS govern batched decode and SPLIT_K_ATTN only varlen
// attention (varlenKnobsFrom), so decode plans leave SplitK at auto.
func knobsFrom(c config.Config) dispatch.Knobs {
	k := dispatch.DefaultKnobs()
	k.PagedFlash = c.PagedFlash
	k.ForcedSplits = c.PagedFlashSplits
	k.ScratchLimitBytes = c.ScratchLimitBytes
	k.Clusters = c.DecodeClusters
	k.Narrow = c.DecodeNarrow
	k.Balance = splitMode(c.DecodeBalance)
	return k
}

// varlenKnobsFrom returns the varlen planner's knobs of c: SPLIT_K_ATTN,
// VARLEN_CLUSTERS, VARLEN_WGMMA and the scratch limit (a forced split count
// comes only from PlanVarlenWith).
func varlenKnobsFrom(c config.Config) dispatch.Knobs {
	k := dispatch.DefaultKnobs()
	k.SplitK = splitMode(c.SplitKAttn)
	k.ScratchLimitBytes = c.ScratchLimitBytes
	k.Clusters = c.VarlenClusters
	k.VarlenWGMMA = splitMode(c.VarlenWGMMA)
	return k
}

// DecodeKnobs returns the knobs decode plans are made with (the
// configuration in effect): change one field and pass them to
// PlanDecodeWith to force that choice alone (the zero Knobs for a nil
// Runtime).
func (r *Runtime) DecodeKnobs() dispatch.Knobs {
	if r == nil {
		return dispatch.Knobs{}
	}
	return r.knobs
}

// VarlenKnobs returns the knobs varlen plans are made with, for
// PlanVarlenWith, as DecodeKnobs does for decode.
func (r *Runtime) VarlenKnobs() dispatch.Knobs {
	if r == nil {
		return dispatch.Knobs{}
	}
	return r.varlenKnobs
}

// splitMode maps a config split mode to the planner's (the two mirror each
// other; config may not import dispatch).
func splitMode(m config.SplitMode) dispatch.SplitMode {
	switch m {
	case config.SplitOff:
		return dispatch.SplitOff
	case config.SplitOn:
		return dispatch.SplitOn
	}
	return dispatch.SplitAuto
}

// Info describes the device (the zero DeviceInfo for a nil Runtime).
func (r *Runtime) Info() DeviceInfo {
	if r == nil {
		return DeviceInfo{}
	}
	return r.info
}

// Config is the configuration in effect, with the source of each value (the
// zero Config for a nil Runtime).
func (r *Runtime) Config() config.Config {
	if r == nil {
		return config.Config{}
	}
	return r.cfg
}

// Stream is the Runtime's own stream, used by callers that need only one
// (nil for a nil Runtime, which every op refuses).
func (r *Runtime) Stream() *Stream {
	if r == nil {
		return nil
	}
	return r.stream
}

// Close frees the Runtime's streams, scratch buffers and modules and releases
// the primary context. It is safe to call more than once, and on a nil
// Runtime (it does nothing).
func (r *Runtime) Close() error {
	if r == nil {
		return nil
	}
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if r.closed.Swap(true) {
		return nil
	}
	r.cleanup.Stop()
	var errs []error
	errs = append(errs, r.ctx.Do(func() error { return driver.CtxSynchronize() }))
	errs = append(errs, r.scratch.Close(), r.counters.Close())
	r.streamMu.Lock()
	streams := make([]*Stream, 0, len(r.streams))
	for s := range r.streams {
		streams = append(streams, s)
	}
	r.streamMu.Unlock()
	for _, s := range streams {
		errs = append(errs, s.destroy())
	}
	r.mu.Lock()
	for _, m := range r.modules {
		mod := m.module
		errs = append(errs, r.ctx.Do(mod.Unload))
	}
	r.modules = map[string]loadedModule{}
	r.funcs = map[string]driver.Function{}
	r.mu.Unlock()
	errs = append(errs, r.device.PrimaryCtxRelease())
	return errors.Join(errs...)
}

// live is every entry point's first check: r is an open Runtime.
func (r *Runtime) live() error {
	if r == nil {
		return errf("the *Runtime is nil; open one with pagedkv.Open")
	}
	if r.closed.Load() {
		return ErrClosed
	}
	return nil
}

// on is the first check of every op that enqueues on a stream: r is open and
// s is an open Stream of r. A Stream of another Runtime, even of the same
// device, is refused: its split-K scratch and fault record belong to that
// Runtime.
// op names the call for the errors.
func (r *Runtime) on(op string, s *Stream) error {
	if err := r.live(); err != nil {
		return err
	}
	if s == nil {
		return errf("%s: the *Stream is nil; pass Runtime.Stream() or a Stream from NewStream or WrapStream", op)
	}
	if s.r != r {
		return errf("%s: the Stream belongs to another Runtime; use a Stream of the Runtime that runs the op", op)
	}
	if s.closed.Load() {
		return errf("%s: the Stream (%#x) is closed", op, uintptr(s.s))
	}
	return nil
}

// do runs fn with the Runtime's context current on a locked OS thread.
func (r *Runtime) do(fn func() error) error { return r.ctx.Do(fn) }

// scratchAllocator gives the scratch pools stream-ordered device memory,
// zeroed in stream order when zero is set.
type scratchAllocator struct {
	r    *Runtime
	zero bool
}

func (a scratchAllocator) AllocAsync(bytes int64, stream uintptr) (uintptr, error) {
	var p driver.DevicePtr
	err := a.r.do(func() error {
		var err error
		if p, err = driver.MemAllocAsync(uint64(bytes), driver.Stream(stream)); err != nil || !a.zero {
			return err
		}
		return driver.MemsetD8Async(p, 0, uint64(bytes), driver.Stream(stream))
	})
	return uintptr(p), err
}

func (a scratchAllocator) FreeAsync(ptr uintptr, stream uintptr) error {
	return a.r.do(func() error { return driver.MemFreeAsync(driver.DevicePtr(ptr), driver.Stream(stream)) })
}

// driverCleanup is the backstop runtime.AddCleanup runs for a driver resource
// its owner never released: release, in the Runtime's context, unless the
// Runtime is closed (which released everything). It must not refer to the
// owner itself.
type driverCleanup struct {
	r       *Runtime
	release func() error
}

func (c driverCleanup) run() {
	if c.r.closed.Load() {
		return
	}
	_ = c.r.do(c.release)
}
