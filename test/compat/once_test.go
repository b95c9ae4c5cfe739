package compat

import "sync"

var (
	binOnce sync.Once
	binPath string
	binErr  error
)
