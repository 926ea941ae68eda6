//go:build tools

// This file pins the module's dependencies while packages that import them
// are being written; it is never built.
package pagedkv

import (
	_ "github.com/ebitengine/purego"
	_ "github.com/spf13/viper"
	_ "github.com/stretchr/testify/assert"
	_ "github.com/stretchr/testify/require"
)
