module github.com/pagedkv/pagedkv

go 1.24.0
