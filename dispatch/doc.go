// Package dispatch is pagedkv's planner: a pure function from an op's shape, the
// device's facts and the tuning knobs to a plan that the launcher follows to the
// letter (kernel entry name, grid, block, shared memory, split count and the
// layout of the split-K scratch buffer). Each op family has one plan type:
// DecodePlan, VarlenPlan and TokenPlan (cache writes, gathers, RoPE, QKV);
// each embeds its Launch, and the attention plans their SplitK. Its files go
// by op: decode.go, varlen.go, append.go, qkv.go, with plan.go shared and
// names.go the kernel entry names. It makes no driver calls and imports
// nothing from the module, so every decision can be tested on a CPU; the root
// package converts its configuration into Knobs and its device queries into
// DeviceFacts.
//
// Planning on the success path allocates nothing: every kernel entry name is
// built once at package initialization, and a plan's Reason is always one of
// the Reason constants.
package dispatch
