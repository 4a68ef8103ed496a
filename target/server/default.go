package server

import (
	_ "embed" // the default configuration
)

// DefaultConfig is nvmetd's embedded default configuration (HCL): one
// 1 GiB memory-backed namespace in DefaultNQN on 127.0.0.1:4420 over the
// soft RoCEv2 provider, open to any host. The initiator's self-test serves
// it too, with its address and size adjusted.
//
//go:embed default.hcl
var DefaultConfig []byte

// DefaultNQN is the subsystem of DefaultConfig.
const DefaultNQN = "nqn.2026-11.io.nvmeof:default"
