package configfs

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// Congestion is a soft-provider port's RoCEv2 congestion control (the HCL
// block `congestion { ... }`, nvmetd only; docs/congestion.md): ECN
// marking, CNPs and DCQCN. Zero values take the soft provider's defaults
// (rdma/soft.CongestionConfig, whose fields these mirror). configfs does
// not import rdma/soft: the code that opens the port's device copies them.
type Congestion struct {
	// Enabled turns congestion control on (the block alone does not).
	Enabled bool
	// ECN is the codepoint of data packets: "ect0" (the default, as
	// ConnectX) or "ect1".
	ECN string
	// MinCNPInterval is the least time between two CNPs of one QP.
	MinCNPInterval time.Duration
	// CNPDSCP is the DSCP of CNPs: 1..63, -1 for the QP's own class, 0
	// for the default (48).
	CNPDSCP int
	// Rates in bits per second: LineRate (before the first CNP and
	// after recovery), MinRate (the floor of cuts), AdditiveIncrease
	// (R_AI) and HyperIncrease (R_HAI).
	LineRate, MinRate, AdditiveIncrease, HyperIncrease float64
	// G is DCQCN's alpha gain, in (0, 1].
	G float64
	// AlphaPeriod (K), IncreasePeriod (T) and RateReducePeriod are
	// DCQCN's timers.
	AlphaPeriod, IncreasePeriod, RateReducePeriod time.Duration
	// ByteCounter (B) is the bytes per byte counter increase event.
	ByteCounter int64
	// FastRecoverySteps (F) is the increase events before additive
	// increase.
	FastRecoverySteps int

	src *source
}

// ECN codepoints of Congestion.ECN.
const (
	ECNECT0 = "ect0"
	ECNECT1 = "ect1"
)

// Bounds of the congestion block's values.
const (
	MaxCongestionPeriod = time.Second
	MinCongestionRate   = 1e3  // 1 kb/s
	MaxCongestionRate   = 1e13 // 10 Tb/s
	MaxByteCounter      = 1 << 40
	MaxFastRecovery     = 1000
)

// congestionHCLNames maps the block's attributes (configfs has none: it
// is nvmetd's) to themselves, for errors and the schema.
var congestionHCLNames = map[string]string{
	"enabled": "enabled", "ecn": "ecn", "min_cnp_interval": "min_cnp_interval", "cnp_dscp": "cnp_dscp",
	"line_rate": "line_rate", "min_rate": "min_rate", "additive_increase": "additive_increase",
	"hyper_increase": "hyper_increase", "g": "g", "alpha_period": "alpha_period",
	"increase_period": "increase_period", "rate_reduce_period": "rate_reduce_period",
	"byte_counter": "byte_counter", "fast_recovery_steps": "fast_recovery_steps",
}

var congestionSchema = &hcl.BodySchema{Attributes: schemaAttrs(congestionHCLNames)}

// congestion decodes port p's congestion block.
func (d *hclDecoder) congestion(p *Port, b *hcl.Block, path string) {
	path += "/congestion"
	if p.Congestion != nil {
		r := b.DefRange
		d.errs = append(d.errs, &Error{Range: &r, Path: path, Msg: "a port has at most one congestion block"})
		return
	}
	c := &Congestion{src: newSource(b)}
	p.Congestion = c
	content := d.content(b.Body, congestionSchema, c.src, congestionHCLNames)
	for name, a := range content.Attributes {
		switch name {
		case "enabled":
			c.Enabled, _ = d.boolean(c.src, path, a)
		case "ecn":
			c.ECN, _ = d.str(c.src, path, a)
		case "cnp_dscp":
			intAttr(d, &c.CNPDSCP, c.src, path, a, -1, 63)
		case "fast_recovery_steps":
			intAttr(d, &c.FastRecoverySteps, c.src, path, a, 1, MaxFastRecovery)
		case "byte_counter":
			c.ByteCounter, _ = d.size(c.src, path, a)
		case "g":
			if v, ok := d.convert(c.src, path, a, cty.Number, "a number"); ok {
				c.G, _ = v.AsBigFloat().Float64()
			}
		case "line_rate", "min_rate", "additive_increase", "hyper_increase":
			v, ok := d.rate(c.src, path, a)
			if ok {
				*map[string]*float64{"line_rate": &c.LineRate, "min_rate": &c.MinRate,
					"additive_increase": &c.AdditiveIncrease, "hyper_increase": &c.HyperIncrease}[name] = v
			}
		default: // the durations
			v, ok := d.duration(c.src, path, a)
			if ok {
				*map[string]*time.Duration{"min_cnp_interval": &c.MinCNPInterval, "alpha_period": &c.AlphaPeriod,
					"increase_period": &c.IncreasePeriod, "rate_reduce_period": &c.RateReducePeriod}[name] = v
			}
		}
	}
}

// duration decodes a Go duration string ("50us").
func (d *hclDecoder) duration(src *source, path string, a *hcl.Attribute) (time.Duration, bool) {
	s, ok := d.str(src, path, a)
	if !ok {
		return 0, false
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		d.attrErr(src, path, a, "want a duration like \"50us\": %v", err)
		return 0, false
	}
	return v, true
}

// rate decodes a rate in bits per second: a number, or a string with a
// unit (ParseRate).
func (d *hclDecoder) rate(src *source, path string, a *hcl.Attribute) (float64, bool) {
	v, ok := d.value(src, path, a)
	if !ok {
		return 0, false
	}
	switch v.Type() {
	case cty.Number:
		f, _ := v.AsBigFloat().Float64()
		return f, true
	case cty.String:
		f, err := ParseRate(v.AsString())
		if err != nil {
			d.attrErr(src, path, a, "%v", err)
			return 0, false
		}
		return f, true
	}
	d.attrErr(src, path, a, "want bits per second or a string like \"10Gbit\", got %s", v.Type().FriendlyName())
	return 0, false
}

// ParseRate parses a rate in bits per second: a number with an optional
// unit kbit, Mbit, Gbit or Tbit (decimal; "bit" and "bps" alone are
// bits per second), like tc's.
func ParseRate(s string) (float64, error) {
	t := strings.TrimSpace(s)
	num := strings.TrimRightFunc(t, func(r rune) bool { return r < '0' || r > '9' && r != '.' })
	unit := strings.ToLower(strings.TrimSpace(t[len(num):]))
	mult := map[string]float64{"": 1, "bit": 1, "bps": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}[unit]
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || math.IsInf(f, 0) || f < 0 {
		return 0, fmt.Errorf("rate %q: want bits per second like \"40Mbit\" or \"10Gbit\"", s)
	}
	return f * mult, nil
}

// validate checks the block's values and that its port can have one: an
// rdma port with provider soft.
func (c *Congestion) validate(col *collector, p *Port, path string) {
	path += "/congestion"
	add := func(attr, format string, args ...any) {
		col.add(c.src, congestionHCLNames, path, attr, format, args...)
	}
	switch {
	case p.Trtype != TransportRDMA:
		add("", "congestion control needs transport rdma with provider \"soft\" (transport %q)", p.Trtype)
	case p.Provider != ProviderSoft:
		add("", "congestion control is the soft provider's: set provider = \"soft\" (provider %q; ConnectX NICs configure it in firmware)", p.EffectiveProvider())
	}
	c.validateValues(add)
}

// validateValues checks the values, reporting each bad one to add.
func (c *Congestion) validateValues(add func(attr, format string, args ...any)) {
	switch c.ECN {
	case "", ECNECT0, ECNECT1:
	default:
		add("ecn", "unknown ECN codepoint %q (want %q or %q)", c.ECN, ECNECT0, ECNECT1)
	}
	if c.CNPDSCP < -1 || c.CNPDSCP > 63 {
		add("cnp_dscp", "%d is not a DSCP from 1 to 63, or -1 (the QP's class)", c.CNPDSCP)
	}
	for _, r := range []struct {
		attr string
		v    float64
	}{{"line_rate", c.LineRate}, {"min_rate", c.MinRate}, {"additive_increase", c.AdditiveIncrease}, {"hyper_increase", c.HyperIncrease}} {
		if r.v != 0 && (r.v < MinCongestionRate || r.v > MaxCongestionRate) {
			add(r.attr, "%g bits per second is out of range (%g to %g)", r.v, float64(MinCongestionRate), float64(MaxCongestionRate))
		}
	}
	if c.LineRate != 0 && c.MinRate != 0 && c.MinRate > c.LineRate {
		add("min_rate", "min_rate %g is above line_rate %g", c.MinRate, c.LineRate)
	}
	if c.G != 0 && (c.G < 0 || c.G > 1 || math.IsNaN(c.G)) {
		add("g", "%g is not in (0, 1]", c.G)
	}
	for _, t := range []struct {
		attr string
		v    time.Duration
	}{{"min_cnp_interval", c.MinCNPInterval}, {"alpha_period", c.AlphaPeriod}, {"increase_period", c.IncreasePeriod}, {"rate_reduce_period", c.RateReducePeriod}} {
		if t.v < 0 || t.v > MaxCongestionPeriod {
			add(t.attr, "%v is out of range (0 for the default, up to %v)", t.v, MaxCongestionPeriod)
		}
	}
	if c.ByteCounter < 0 || c.ByteCounter > MaxByteCounter {
		add("byte_counter", "%d bytes is out of range (up to %d)", c.ByteCounter, int64(MaxByteCounter))
	}
	if c.FastRecoverySteps < 0 || c.FastRecoverySteps > MaxFastRecovery {
		add("fast_recovery_steps", "%d is out of range (1 to %d)", c.FastRecoverySteps, MaxFastRecovery)
	}
}

// congestionEqual reports whether two ports' congestion blocks configure
// the same (a change restarts the port's listener).
func congestionEqual(a, b *Congestion) bool {
	switch {
	case a == nil || b == nil:
		return a == nil && b == nil
	}
	x, y := *a, *b
	x.src, y.src = nil, nil
	return x == y
}

// writeCongestionHCL writes c as a congestion block of b.
func writeCongestionHCL(b *hclwrite.Body, c *Congestion) {
	cb := b.AppendNewBlock("congestion", nil).Body()
	cb.SetAttributeValue("enabled", cty.BoolVal(c.Enabled))
	if c.ECN != "" {
		cb.SetAttributeValue("ecn", cty.StringVal(c.ECN))
	}
	if c.CNPDSCP != 0 {
		cb.SetAttributeValue("cnp_dscp", cty.NumberIntVal(int64(c.CNPDSCP)))
	}
	for _, r := range []struct {
		attr string
		v    float64
	}{{"line_rate", c.LineRate}, {"min_rate", c.MinRate}, {"additive_increase", c.AdditiveIncrease}, {"hyper_increase", c.HyperIncrease}, {"g", c.G}} {
		if r.v != 0 {
			cb.SetAttributeValue(r.attr, cty.NumberVal(new(big.Float).SetFloat64(r.v)))
		}
	}
	for _, t := range []struct {
		attr string
		v    time.Duration
	}{{"min_cnp_interval", c.MinCNPInterval}, {"alpha_period", c.AlphaPeriod}, {"increase_period", c.IncreasePeriod}, {"rate_reduce_period", c.RateReducePeriod}} {
		if t.v != 0 {
			cb.SetAttributeValue(t.attr, cty.StringVal(t.v.String()))
		}
	}
	if c.ByteCounter != 0 {
		cb.SetAttributeValue("byte_counter", cty.NumberIntVal(c.ByteCounter))
	}
	if c.FastRecoverySteps != 0 {
		cb.SetAttributeValue("fast_recovery_steps", cty.NumberIntVal(int64(c.FastRecoverySteps)))
	}
}

// checkSharedCongestion refuses two soft rdma ports on one address (they
// share one soft device) whose congestion blocks differ; seen holds the
// first port of each address.
func checkSharedCongestion(col *collector, seen map[string]*Port, p *Port, path string) {
	if p.Trtype != TransportRDMA || p.Provider != ProviderSoft {
		return
	}
	key := p.Traddr
	if a, err := netip.ParseAddr(p.Traddr); err == nil {
		key = a.Unmap().String()
	}
	first := seen[key]
	if first == nil {
		seen[key] = p
		return
	}
	if !congestionEqual(first.Congestion, p.Congestion) {
		src, names := p.src, portHCLNames
		if p.Congestion != nil {
			src, names = p.Congestion.src, congestionHCLNames
		}
		col.add(src, names, path, "", "port %s on %s shares its soft RDMA device and has another congestion block: give both the same", first.ID, p.Traddr)
	}
}

// Spec returns c as one string ParseCongestionSpec reads back: "off",
// "on", or the block's keys that are set as KEY=VALUE pairs (rates in
// bits per second, periods as Go durations, byte_counter in bytes).
func (c *Congestion) Spec() string {
	if c == nil {
		return "off"
	}
	kv := []string{"enabled=" + strconv.FormatBool(c.Enabled)}
	add := func(k, v string) { kv = append(kv, k+"="+v) }
	if c.ECN != "" {
		add("ecn", c.ECN)
	}
	if c.CNPDSCP != 0 {
		add("cnp_dscp", strconv.Itoa(c.CNPDSCP))
	}
	for _, r := range []struct {
		k string
		v float64
	}{{"line_rate", c.LineRate}, {"min_rate", c.MinRate}, {"additive_increase", c.AdditiveIncrease}, {"hyper_increase", c.HyperIncrease}, {"g", c.G}} {
		if r.v != 0 {
			add(r.k, strconv.FormatFloat(r.v, 'g', -1, 64))
		}
	}
	for _, d := range []struct {
		k string
		v time.Duration
	}{{"min_cnp_interval", c.MinCNPInterval}, {"alpha_period", c.AlphaPeriod}, {"increase_period", c.IncreasePeriod}, {"rate_reduce_period", c.RateReducePeriod}} {
		if d.v != 0 {
			add(d.k, d.v.String())
		}
	}
	if c.ByteCounter != 0 {
		add("byte_counter", strconv.FormatInt(c.ByteCounter, 10))
	}
	if c.FastRecoverySteps != 0 {
		add("fast_recovery_steps", strconv.Itoa(c.FastRecoverySteps))
	}
	if len(kv) == 1 {
		if c.Enabled {
			return "on"
		}
		return "off"
	}
	return strings.Join(kv, ",")
}

// ParseCongestionSpec parses congestion control settings given as one
// string, as the host CLI's --congestion and the fio engine's congestion
// option take them: "on" or "off", or KEY=VALUE pairs separated by
// commas with the congestion block's keys and values ("line_rate=25Gbit,
// ecn=ect1"), which turn it on unless they say enabled=false. The values
// are checked as the block's.
func ParseCongestionSpec(spec string) (*Congestion, error) {
	c := &Congestion{}
	switch s := strings.TrimSpace(spec); s {
	case "", "off", "false":
		return c, nil
	case "on", "true":
		c.Enabled = true
		return c, nil
	}
	c.Enabled = true
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			bad("%q: want KEY=VALUE (or on, off)", kv)
			continue
		}
		var err error
		switch k {
		case "enabled":
			c.Enabled, err = strconv.ParseBool(v)
		case "ecn":
			c.ECN = v
		case "cnp_dscp":
			c.CNPDSCP, err = strconv.Atoi(v)
		case "fast_recovery_steps":
			c.FastRecoverySteps, err = strconv.Atoi(v)
			if err == nil && c.FastRecoverySteps == 0 {
				err = errors.New("want 1 or more")
			}
		case "byte_counter":
			c.ByteCounter, err = ParseSize(v)
		case "g":
			c.G, err = strconv.ParseFloat(v, 64)
		case "line_rate", "min_rate", "additive_increase", "hyper_increase":
			var f float64
			f, err = ParseRate(v)
			*map[string]*float64{"line_rate": &c.LineRate, "min_rate": &c.MinRate,
				"additive_increase": &c.AdditiveIncrease, "hyper_increase": &c.HyperIncrease}[k] = f
		case "min_cnp_interval", "alpha_period", "increase_period", "rate_reduce_period":
			var d time.Duration
			d, err = time.ParseDuration(v)
			*map[string]*time.Duration{"min_cnp_interval": &c.MinCNPInterval, "alpha_period": &c.AlphaPeriod,
				"increase_period": &c.IncreasePeriod, "rate_reduce_period": &c.RateReducePeriod}[k] = d
		default:
			keys := make([]string, 0, len(congestionHCLNames))
			for n := range congestionHCLNames {
				keys = append(keys, n)
			}
			slices.Sort(keys)
			bad("unknown key %q (want %s)", k, strings.Join(keys, ", "))
			continue
		}
		if err != nil {
			bad("%s=%s: %v", k, v, err)
		}
	}
	c.validateValues(func(attr, format string, args ...any) { bad(attr+": "+format, args...) })
	if len(errs) > 0 {
		return nil, fmt.Errorf("congestion %q: %s", spec, strings.Join(errs, "; "))
	}
	return c, nil
}
