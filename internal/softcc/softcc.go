// Package softcc turns the congestion control settings of a configuration
// (configfs.Congestion: nvmetd's port block, the host CLI's --congestion,
// the fio engine's congestion option) into the soft RoCE provider's
// (soft.CongestionConfig), so that configfs stays free of the providers
// and the three callers convert alike.
package softcc

import (
	"github.com/nvmeof/nvmeof/configfs"
	"github.com/nvmeof/nvmeof/rdma/soft"
)

// Config returns c as the soft provider's configuration: nil when c is
// nil or off (the device's default: off).
func Config(c *configfs.Congestion) *soft.CongestionConfig {
	if c == nil || !c.Enabled {
		return nil
	}
	return &soft.CongestionConfig{
		Enabled:           true,
		ECT1:              c.ECN == configfs.ECNECT1,
		MinCNPInterval:    c.MinCNPInterval,
		CNPDSCP:           c.CNPDSCP,
		LineRate:          c.LineRate,
		MinRate:           c.MinRate,
		AdditiveIncrease:  c.AdditiveIncrease,
		HyperIncrease:     c.HyperIncrease,
		G:                 c.G,
		AlphaPeriod:       c.AlphaPeriod,
		IncreasePeriod:    c.IncreasePeriod,
		RateReducePeriod:  c.RateReducePeriod,
		ByteCounter:       c.ByteCounter,
		FastRecoverySteps: c.FastRecoverySteps,
	}
}

// Parse parses a one-string setting (configfs.ParseCongestionSpec) into
// the soft provider's configuration (nil: off).
func Parse(spec string) (*soft.CongestionConfig, error) {
	c, err := configfs.ParseCongestionSpec(spec)
	if err != nil {
		return nil, err
	}
	return Config(c), nil
}
