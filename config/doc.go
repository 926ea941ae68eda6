// Package config loads pagedkv's tuning knobs from explicit options, the
// environment (prefix PAGEDKV_), an optional YAML or TOML file and built-in
// defaults, in that order of precedence. Every knob has one name in three
// spellings: the environment variable (PAGEDKV_KV_CAPACITY), the file key
// (kv_capacity) and the Go field (KVCapacity). Values are validated wherever
// they come from, and an invalid value is an error naming the variable, the
// value and what is allowed; nothing is silently ignored. That includes
// names: a PAGEDKV_ variable that is neither a knob nor one of NonKnobEnv, or
// a file key that is not a knob, is an error. Every error Load returns wraps
// ErrInvalid.
//
// # Grammar
//
// Each knob has one grammar, whatever the source: a value is text, and the
// same text is accepted or rejected alike in the environment, in the file and
// (for the SplitMode knobs) in Options. A file's values are taken as written,
// not as YAML or TOML decode them: kv_capacity: 5e2 is the text "5e2", not the
// float 500. A quoted string in the file is its content: "4096" and 4096 are
// the same value.
//
//   - Integers are "0" or decimal digits without a leading zero, with "-"
//     for negatives (which no knob allows). Rejected: "+5", "007", "-0", "5e2",
//     "512.0", "0x10", "1_000", "1GiB", " 5".
//   - Booleans are 1, 0, true, false, on or off, in any case. Rejected: yes,
//     no, 2, " on".
//   - Modes (SplitMode) are auto in any case, or a boolean spelling.
//   - PAGEDKV_PAGED_FLASH_SPLITS is auto in any case, or an integer 1..64.
//
// The empty string is never a value. A knob's variable set to "" (PAGEDKV_X=)
// is an error naming the variable, for every knob, rather than a silent
// fall-through to the file or the default: unset the variable to leave a
// knob alone. The same holds for "" in the file and in Options. An unknown
// PAGEDKV_ variable is an error whatever its value, "" included; the one
// non-knob variable read by Load, PAGEDKV_CONFIG, set to "" means no file.
package config
