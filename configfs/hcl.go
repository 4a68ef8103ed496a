package configfs

import (
	"cmp"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// LoadFile reads a configuration file: nvmetcli JSON when the name ends in
// ".json", nvmetd HCL otherwise. The tree is validated; errors are Errors.
// It is Loader{}.LoadFile.
func LoadFile(path string) (*Tree, error) { return Loader{}.LoadFile(path) }

// LoadFile reads a configuration file as the package's LoadFile does, with
// l's checks. Relative backend paths are made absolute against the
// directory of the file, not the working directory: the file means the
// same wherever the daemon starts.
func (l Loader) LoadFile(path string) (*Tree, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("configfs: %w", err)
	}
	var t *Tree
	if strings.HasSuffix(path, ".json") {
		t, err = l.ParseNvmetcliJSON(src, path)
	} else {
		t, err = l.ParseHCL(src, path)
	}
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("configfs: %w", err)
	}
	t.resolvePaths(dir)
	return t, nil
}

// resolvePaths makes the relative backend paths of t's namespaces
// absolute against dir.
func (t *Tree) resolvePaths(dir string) {
	for _, s := range t.Subsystems {
		for _, ns := range s.Namespaces {
			for _, p := range []*string{&ns.DevicePath, &ns.CephConf, &ns.Keyring} {
				if *p != "" && !filepath.IsAbs(*p) {
					*p = filepath.Join(dir, *p)
				}
			}
		}
	}
}

// ParseHCL parses and validates nvmetd's HCL configuration (see the package
// documentation); filename is used in error positions. Unknown attributes
// and blocks are errors. On error it returns nil and Errors holding every
// problem found, each with its file:line:col and attribute name. It is
// Loader{}.ParseHCL.
func ParseHCL(src []byte, filename string) (*Tree, error) { return Loader{}.ParseHCL(src, filename) }

// ParseHCL parses and validates HCL as the package's ParseHCL does, with
// l's checks.
func (l Loader) ParseHCL(src []byte, filename string) (*Tree, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		d := &hclDecoder{}
		d.diags(diags)
		d.errs.sortByPosition()
		return nil, d.errs
	}
	d := &hclDecoder{dir: filepath.Dir(filename)}
	t := d.tree(f.Body)
	c := l.collector()
	c.errs = d.errs
	t.validate(c)
	c.errs.sortByPosition()
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	return t, nil
}

// hclToConfigfs inverts the name tables.
var (
	treeAttrs   = invert(treeHCLNames)
	portAttrs   = invert(portHCLNames)
	subsysAttrs = invert(subsysHCLNames)
	nsAttrs     = invert(nsHCLNames)
	anaAttrs    = invert(anaGroupHCLNames)
)

func invert(m map[string]string) map[string]string {
	r := make(map[string]string, len(m))
	for k, v := range m {
		r[v] = k
	}
	return r
}

func schemaAttrs(m map[string]string) []hcl.AttributeSchema {
	var names []string
	for _, v := range m {
		names = append(names, v)
	}
	slices.Sort(names)
	out := make([]hcl.AttributeSchema, len(names))
	for i, n := range names {
		out[i] = hcl.AttributeSchema{Name: n}
	}
	return out
}

var (
	rootSchema = &hcl.BodySchema{
		Attributes: schemaAttrs(treeHCLNames),
		Blocks: []hcl.BlockHeaderSchema{
			{Type: "port", LabelNames: []string{"name"}},
			{Type: "subsystem", LabelNames: []string{"nqn"}},
			{Type: "host", LabelNames: []string{"nqn"}},
		},
	}
	portSchema = &hcl.BodySchema{
		Attributes: schemaAttrs(portHCLNames),
		Blocks:     []hcl.BlockHeaderSchema{{Type: "ana_group", LabelNames: []string{"grpid"}}, {Type: "congestion"}},
	}
	anaGroupSchema  = &hcl.BodySchema{Attributes: schemaAttrs(anaGroupHCLNames)}
	hostSchema      = &hcl.BodySchema{Attributes: schemaAttrs(hostHCLNames)}
	namespaceSchema = &hcl.BodySchema{Attributes: schemaAttrs(nsHCLNames)}
	subsystemSchema = &hcl.BodySchema{
		Attributes: schemaAttrs(subsysHCLNames),
		Blocks:     []hcl.BlockHeaderSchema{{Type: "namespace", LabelNames: []string{"nsid"}}},
	}
)

// hclDecoder turns an HCL body into a Tree, collecting errors.
type hclDecoder struct {
	errs Errors
	dir  string // the configuration file's directory, for key files
}

func (d *hclDecoder) diags(ds hcl.Diagnostics) {
	for _, diag := range ds {
		if diag.Severity != hcl.DiagError {
			continue
		}
		msg := diag.Summary
		if diag.Detail != "" {
			msg += ": " + diag.Detail
		}
		e := &Error{Msg: msg}
		if diag.Subject != nil {
			r := *diag.Subject
			e.Range = &r
		}
		d.errs = append(d.errs, e)
	}
}

// attrErr records an error about an attribute's value and marks the
// attribute bad so validation does not report it again.
func (d *hclDecoder) attrErr(src *source, path string, a *hcl.Attribute, format string, args ...any) {
	r := a.Expr.Range()
	d.errs = append(d.errs, &Error{Range: &r, Path: path, Attr: a.Name, Msg: fmt.Sprintf(format, args...)})
	markBad(src, a)
}

func markBad(src *source, a *hcl.Attribute) {
	for k, sa := range src.attrs {
		if sa.name == a.Name {
			src.bad[k] = true
		}
	}
}

func newSource(block *hcl.Block) *source {
	s := &source{attrs: make(map[string]srcAttr), bad: make(map[string]bool)}
	if block != nil {
		s.block = block.DefRange
		if len(block.LabelRanges) > 0 {
			s.label = block.LabelRanges[0]
		}
	}
	return s
}

// content decodes a body against a schema and records the attributes'
// positions under their configfs names.
func (d *hclDecoder) content(body hcl.Body, schema *hcl.BodySchema, src *source, names map[string]string) *hcl.BodyContent {
	content, diags := body.Content(schema)
	d.diags(diags)
	for name, attr := range content.Attributes {
		src.attrs[names[name]] = srcAttr{name: name, rng: attr.Expr.Range()}
	}
	return content
}

func (d *hclDecoder) tree(body hcl.Body) *Tree {
	t := &Tree{LogLevel: DefaultLogLevel, src: newSource(nil)}
	content := d.content(body, rootSchema, t.src, treeAttrs)
	if a := content.Attributes["log_level"]; a != nil {
		// "" means the default, as validation takes it; keeping it
		// would not survive Tree.HCL, which writes the default.
		if v, ok := d.str(t.src, "", a); ok && v != "" {
			t.LogLevel = v
		}
	}
	type link struct {
		s    *Subsystem
		attr *hcl.Attribute
		ids  []string
	}
	var links []link
	for _, b := range content.Blocks {
		switch b.Type {
		case "port":
			t.Ports = append(t.Ports, d.port(b))
		case "host":
			h := &Host{NQN: b.Labels[0], src: newSource(b)}
			d.hostBody(h, d.content(b.Body, hostSchema, h.src, hostAttrs))
			t.Hosts = append(t.Hosts, h)
		case "subsystem":
			s, ports, attr := d.subsystem(b)
			t.Subsystems = append(t.Subsystems, s)
			if attr != nil {
				links = append(links, link{s, attr, ports})
			}
		}
	}
	// Hosts named in allowed_hosts without a host block get one, as the
	// configfs tree needs hosts/<nqn> for each allowed_hosts link.
	for _, s := range t.Subsystems {
		for _, nqn := range s.AllowedHosts {
			if t.Host(nqn) == nil {
				src := newSource(nil)
				src.block = s.src.attrs["allowed_hosts"].rng
				t.Hosts = append(t.Hosts, &Host{NQN: nqn, implicit: true, src: src})
			}
		}
	}
	// A subsystem's ports become links in the ports, as in configfs.
	for _, l := range links {
		seen := make(map[string]bool)
		for _, id := range l.ids {
			p := t.Port(id)
			switch {
			case seen[id]:
				d.attrErr(l.s.src, "subsystems/"+l.s.NQN, l.attr, "port %q listed twice", id)
			case p == nil:
				d.attrErr(l.s.src, "subsystems/"+l.s.NQN, l.attr, "unknown port %q (no port block declares it)", id)
			case !slices.Contains(p.Subsystems, l.s.NQN):
				p.Subsystems = append(p.Subsystems, l.s.NQN)
			}
			seen[id] = true
		}
	}
	return t
}

func (d *hclDecoder) port(b *hcl.Block) *Port {
	p := NewPort(b.Labels[0])
	p.src = newSource(b)
	path := "ports/" + p.ID
	content := d.content(b.Body, portSchema, p.src, portAttrs)
	for name, a := range content.Attributes {
		switch name {
		case "transport":
			p.Trtype, _ = d.str(p.src, path, a)
		case "provider":
			p.Provider, _ = d.str(p.src, path, a)
		case "device":
			p.Device, _ = d.str(p.src, path, a)
		case "tos":
			intAttr(d, &p.TOS, p.src, path, a, 0, MaxTOS)
		case "connect_timeout":
			intAttr(d, &p.ConnectTimeout, p.src, path, a, 1, MaxConnectTimeout)
		case "max_pending":
			intAttr(d, &p.MaxPending, p.src, path, a, 1, MaxPending)
		case "max_pending_per_host":
			intAttr(d, &p.MaxPendingPerHost, p.src, path, a, 1, MaxPending)
		case "data_pool_size":
			p.DataPoolSize, _ = d.size(p.src, path, a)
		case "srq_size":
			intAttr(d, &p.SRQSize, p.src, path, a, 0, MaxSRQSize)
		case "address":
			p.Traddr, _ = d.str(p.src, path, a)
		case "address_family":
			p.Adrfam, _ = d.str(p.src, path, a)
		case "service":
			p.Trsvcid, _ = d.str(p.src, path, a)
		case "treq":
			p.Treq, _ = d.str(p.src, path, a)
		case "inline_data_size":
			intAttr(d, &p.InlineDataSize, p.src, path, a, 0, MaxInlineDataSize)
		case "portid":
			intAttr(d, &p.PortID, p.src, path, a, 1, 0xffff)
		case "subsystems":
			p.Subsystems, _ = d.strList(p.src, path, a)
		}
	}
	for _, gb := range content.Blocks {
		if gb.Type == "congestion" {
			d.congestion(p, gb, path)
			continue
		}
		d.anaGroup(p, gb, path)
	}
	sortANAGroups(p.ANAGroups)
	if p.Adrfam == "" && (p.Trtype == TransportRDMA || p.Trtype == TransportTCP) {
		p.Adrfam = p.DerivedAdrfam()
	}
	return p
}

// anaGroup decodes an ana_group block of port p into p.ANAGroups, its
// source into p.src.sub.
func (d *hclDecoder) anaGroup(p *Port, b *hcl.Block, path string) {
	label := b.Labels[0]
	src := newSource(b)
	content := d.content(b.Body, anaGroupSchema, src, anaAttrs)
	id, err := strconv.ParseUint(label, 10, 32)
	if err != nil || !allDigits(label) {
		r := b.LabelRanges[0]
		d.errs = append(d.errs, &Error{Range: &r, Path: path + "/ana_groups/" + label,
			Msg: fmt.Sprintf("ana_group label %q is not an ANA group ID (a decimal number from 1 to %d)", label, MaxANAGroups)})
		return
	}
	g := ANAGroup{GrpID: uint32(id), State: ANAOptimized}
	gpath := path + "/ana_groups/" + strconv.FormatUint(id, 10)
	key := anaGroupKey(g.GrpID)
	if p.src.sub[key] != nil {
		r := b.LabelRanges[0]
		d.errs = append(d.errs, &Error{Range: &r, Path: gpath, Msg: fmt.Sprintf("ana_group %d declared twice", id)})
		return
	}
	if a := content.Attributes["state"]; a != nil {
		if v, ok := d.str(src, gpath, a); ok {
			g.State = v
		}
	}
	if p.src.sub == nil {
		p.src.sub = make(map[string]*source)
	}
	p.src.sub[key] = src
	p.ANAGroups = append(p.ANAGroups, g)
}

// anaGroupKey is the key of ANA group grpid's block in its port's
// source.sub.
func anaGroupKey(grpid uint32) string { return "ana_groups/" + strconv.FormatUint(uint64(grpid), 10) }

// sortANAGroups puts groups in grpid order (stable: validation reports
// the later of two with one ID).
func sortANAGroups(gs []ANAGroup) {
	slices.SortStableFunc(gs, func(a, b ANAGroup) int { return cmp.Compare(a.GrpID, b.GrpID) })
}

func (d *hclDecoder) subsystem(b *hcl.Block) (s *Subsystem, ports []string, portsAttr *hcl.Attribute) {
	s = NewSubsystem(b.Labels[0])
	s.src = newSource(b)
	path := "subsystems/" + s.NQN
	content := d.content(b.Body, subsystemSchema, s.src, subsysAttrs)
	for name, a := range content.Attributes {
		switch name {
		case "ports":
			var ok bool
			if ports, ok = d.strList(s.src, path, a); ok {
				portsAttr = a
			}
		case "allow_any_host":
			s.AllowAnyHost, _ = d.boolean(s.src, path, a)
		case "allowed_hosts":
			s.AllowedHosts, _ = d.strList(s.src, path, a)
		case "serial":
			s.Serial, _ = d.str(s.src, path, a)
		case "model":
			s.Model, _ = d.str(s.src, path, a)
		case "firmware":
			s.Firmware, _ = d.str(s.src, path, a)
		case "version":
			s.Version, _ = d.str(s.src, path, a)
		case "cntlid_min":
			intAttr(d, &s.CntlidMin, s.src, path, a, 1, DefaultCntlidMax)
		case "cntlid_max":
			intAttr(d, &s.CntlidMax, s.src, path, a, 1, DefaultCntlidMax)
		case "qid_max":
			intAttr(d, &s.QIDMax, s.src, path, a, 1, MaxQIDMax)
		case "max_controllers":
			intAttr(d, &s.MaxControllers, s.src, path, a, 1, DefaultCntlidMax)
		case "max_controllers_per_host":
			intAttr(d, &s.MaxControllersPerHost, s.src, path, a, 1, DefaultCntlidMax)
		}
	}
	for _, nb := range content.Blocks {
		if ns := d.namespace(nb, path); ns != nil {
			s.Namespaces = append(s.Namespaces, ns)
		}
	}
	return s, ports, portsAttr
}

func (d *hclDecoder) namespace(b *hcl.Block, subsysPath string) *Namespace {
	label := b.Labels[0]
	path := subsysPath + "/namespaces/" + label
	nsid, err := strconv.ParseUint(label, 10, 32)
	if err != nil || !allDigits(label) {
		r := b.LabelRanges[0]
		d.errs = append(d.errs, &Error{Range: &r, Path: path, Msg: fmt.Sprintf("namespace label %q is not an NSID (a decimal number from 1 to %d)", label, uint32(MaxNSID))})
		return nil
	}
	ns := NewNamespace(uint32(nsid))
	ns.src = newSource(b)
	content := d.content(b.Body, namespaceSchema, ns.src, nsAttrs)
	for name, a := range content.Attributes {
		switch name {
		case "backend":
			ns.Backend, _ = d.str(ns.src, path, a)
		case "path":
			ns.DevicePath, _ = d.str(ns.src, path, a)
		case "size":
			ns.Size, _ = d.size(ns.src, path, a)
		case "block_size":
			intAttr(d, &ns.BlockSize, ns.src, path, a, 0, 1<<31)
		case "grow":
			ns.Grow, _ = d.boolean(ns.src, path, a)
		case "uuid":
			if v, ok := d.str(ns.src, path, a); ok {
				u, err := ParseUUID(v)
				if err != nil {
					d.attrErr(ns.src, path, a, "%v", err)
				}
				ns.DeviceUUID = u
			}
		case "nguid":
			if v, ok := d.str(ns.src, path, a); ok {
				g, err := ParseNGUID(v)
				if err != nil {
					d.attrErr(ns.src, path, a, "%v", err)
				}
				ns.DeviceNGUID = g
			}
		case "eui64":
			if v, ok := d.str(ns.src, path, a); ok {
				e, err := ParseEUI64(v)
				if err != nil {
					d.attrErr(ns.src, path, a, "%v", err)
				}
				ns.DeviceEUI64 = e
			}
		case "enabled":
			ns.Enable, _ = d.boolean(ns.src, path, a)
		case "buffered_io":
			ns.BufferedIO, _ = d.boolean(ns.src, path, a)
		case "queue_depth":
			intAttr(d, &ns.QueueDepth, ns.src, path, a, 1, MaxQueueDepth)
		case "resv_enable":
			ns.ResvEnable, _ = d.boolean(ns.src, path, a)
		case "resv_ptpl_file":
			ns.ResvPTPLFile, _ = d.str(ns.src, path, a)
		case "ana_grpid":
			intAttr(d, &ns.ANAGrpID, ns.src, path, a, 1, MaxANAGroups)
		case "pool":
			ns.Pool, _ = d.str(ns.src, path, a)
		case "image":
			ns.Image, _ = d.str(ns.src, path, a)
		case "ceph_conf":
			ns.CephConf, _ = d.str(ns.src, path, a)
		case "client_id":
			ns.ClientID, _ = d.str(ns.src, path, a)
		case "keyring":
			ns.Keyring, _ = d.str(ns.src, path, a)
		}
	}
	if ns.Backend == "" && ns.DevicePath != "" {
		ns.Backend = InferBackend(ns.DevicePath)
	}
	return ns
}

// InferBackend returns the backend for a device path when none is given:
// block for paths under /dev/, file otherwise.
func InferBackend(path string) string {
	if strings.HasPrefix(path, "/dev/") {
		return BackendBlock
	}
	return BackendFile
}

// value evaluates an attribute without variables or functions.
func (d *hclDecoder) value(src *source, path string, a *hcl.Attribute) (cty.Value, bool) {
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		d.diags(diags)
		markBad(src, a)
		return cty.NilVal, false
	}
	if v.IsNull() {
		d.attrErr(src, path, a, "must not be null")
		return cty.NilVal, false
	}
	if !v.IsWhollyKnown() {
		d.attrErr(src, path, a, "value is not known")
		return cty.NilVal, false
	}
	return v, true
}

func (d *hclDecoder) convert(src *source, path string, a *hcl.Attribute, want cty.Type, what string) (cty.Value, bool) {
	v, ok := d.value(src, path, a)
	if !ok {
		return cty.NilVal, false
	}
	cv, err := convert.Convert(v, want)
	if err != nil || cv.IsNull() || !cv.IsWhollyKnown() {
		d.attrErr(src, path, a, "want %s, got %s", what, v.Type().FriendlyName())
		return cty.NilVal, false
	}
	return cv, true
}

func (d *hclDecoder) str(src *source, path string, a *hcl.Attribute) (string, bool) {
	v, ok := d.convert(src, path, a, cty.String, "a string")
	if !ok {
		return "", false
	}
	return v.AsString(), true
}

func (d *hclDecoder) boolean(src *source, path string, a *hcl.Attribute) (bool, bool) {
	v, ok := d.convert(src, path, a, cty.Bool, "true or false")
	if !ok {
		return false, false
	}
	return v.True(), true
}

func (d *hclDecoder) strList(src *source, path string, a *hcl.Attribute) ([]string, bool) {
	v, ok := d.convert(src, path, a, cty.List(cty.String), "a list of strings")
	if !ok {
		return nil, false
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() {
			d.attrErr(src, path, a, "list elements must not be null")
			return nil, false
		}
		out = append(out, e.AsString())
	}
	return out, true
}

// intAttr decodes a whole number in [lo, hi] into *dst, which it leaves
// alone when a is not one.
func intAttr[T ~int | ~uint16 | ~uint32](d *hclDecoder, dst *T, src *source, path string, a *hcl.Attribute, lo, hi int64) {
	v, ok := d.convert(src, path, a, cty.Number, "a number")
	if !ok {
		return
	}
	bf := v.AsBigFloat()
	n, acc := bf.Int64()
	if !bf.IsInt() || acc != big.Exact || n < lo || n > hi {
		d.attrErr(src, path, a, "%s is not a whole number from %d to %d", bf.Text('g', 20), lo, hi)
		return
	}
	*dst = T(n)
}

// size decodes a size: a number of bytes or a string for ParseSize.
func (d *hclDecoder) size(src *source, path string, a *hcl.Attribute) (int64, bool) {
	v, ok := d.value(src, path, a)
	if !ok {
		return 0, false
	}
	if v.Type() == cty.Number {
		bf := v.AsBigFloat()
		n, acc := bf.Int64()
		if !bf.IsInt() || acc != big.Exact || n < 0 {
			d.attrErr(src, path, a, "%s is not a whole, non-negative number of bytes", bf.Text('g', 20))
			return 0, false
		}
		return n, true
	}
	if v.Type() != cty.String {
		d.attrErr(src, path, a, "want a number of bytes or a string like \"1GiB\", got %s", v.Type().FriendlyName())
		return 0, false
	}
	n, err := ParseSize(v.AsString())
	if err != nil {
		d.attrErr(src, path, a, "%v", err)
		return 0, false
	}
	return n, true
}

// HCL returns the tree as nvmetd HCL. Parsing the result gives an equal
// tree. Attributes at their defaults are left out.
func (t *Tree) HCL() []byte {
	f := hclwrite.NewEmptyFile()
	root := f.Body()
	level := t.LogLevel
	if level == "" {
		level = DefaultLogLevel
	}
	root.SetAttributeValue("log_level", cty.StringVal(level))

	for _, p := range t.Ports {
		root.AppendNewline()
		b := root.AppendNewBlock("port", []string{p.ID}).Body()
		b.SetAttributeValue("transport", cty.StringVal(p.Trtype))
		if p.Trtype == TransportRDMA && p.EffectiveProvider() != ProviderAuto {
			b.SetAttributeValue("provider", cty.StringVal(p.Provider))
		}
		if p.Device != "" {
			b.SetAttributeValue("device", cty.StringVal(p.Device))
		}
		if p.TOS >= 0 {
			b.SetAttributeValue("tos", cty.NumberIntVal(int64(p.TOS)))
		}
		if p.ConnectTimeout > 0 {
			b.SetAttributeValue("connect_timeout", cty.NumberIntVal(int64(p.ConnectTimeout)))
		}
		if p.MaxPending > 0 {
			b.SetAttributeValue("max_pending", cty.NumberIntVal(int64(p.MaxPending)))
		}
		if p.MaxPendingPerHost > 0 {
			b.SetAttributeValue("max_pending_per_host", cty.NumberIntVal(int64(p.MaxPendingPerHost)))
		}
		if p.DataPoolSize > 0 {
			b.SetAttributeValue("data_pool_size", cty.NumberIntVal(p.DataPoolSize))
		}
		if p.SRQSize >= 0 {
			b.SetAttributeValue("srq_size", cty.NumberIntVal(int64(p.SRQSize)))
		}
		if p.Traddr != "" {
			b.SetAttributeValue("address", cty.StringVal(p.Traddr))
		}
		if p.Adrfam != "" && p.Adrfam != p.DerivedAdrfam() {
			b.SetAttributeValue("address_family", cty.StringVal(p.Adrfam))
		}
		if p.Trsvcid != "" {
			if n, err := strconv.ParseUint(p.Trsvcid, 10, 16); err == nil && strconv.FormatUint(n, 10) == p.Trsvcid {
				b.SetAttributeValue("service", cty.NumberUIntVal(n))
			} else {
				b.SetAttributeValue("service", cty.StringVal(p.Trsvcid))
			}
		}
		if p.Treq != "" && p.Treq != TreqNotSpecified {
			b.SetAttributeValue("treq", cty.StringVal(p.Treq))
		}
		if p.InlineDataSize >= 0 {
			b.SetAttributeValue("inline_data_size", cty.NumberIntVal(int64(p.InlineDataSize)))
		}
		if p.PortID != 0 {
			b.SetAttributeValue("portid", cty.NumberUIntVal(uint64(p.PortID)))
		}
		// Links to subsystems the tree does not hold cannot be written
		// as the subsystem's ports: keep them here.
		var dangling []cty.Value
		for _, nqn := range p.Subsystems {
			if t.Subsystem(nqn) == nil {
				dangling = append(dangling, cty.StringVal(nqn))
			}
		}
		if len(dangling) > 0 {
			b.SetAttributeValue("subsystems", cty.ListVal(dangling))
		}
		writeANAGroupsHCL(b, p.ANAGroups)
		if p.Congestion != nil {
			writeCongestionHCL(b, p.Congestion)
		}
	}

	for _, h := range t.Hosts {
		if h.implicit {
			continue // allowed_hosts declares it
		}
		root.AppendNewline()
		h.writeAuthHCL(root.AppendNewBlock("host", []string{h.NQN}).Body())
	}

	for _, s := range t.Subsystems {
		root.AppendNewline()
		b := root.AppendNewBlock("subsystem", []string{s.NQN}).Body()
		var ports []string
		for _, p := range t.PortsOf(s.NQN) {
			ports = append(ports, p.ID)
		}
		if len(ports) > 0 {
			b.SetAttributeValue("ports", stringList(ports))
		}
		b.SetAttributeValue("allow_any_host", cty.BoolVal(s.AllowAnyHost))
		if len(s.AllowedHosts) > 0 {
			b.SetAttributeValue("allowed_hosts", stringList(s.AllowedHosts))
		}
		for _, kv := range []struct{ name, v string }{{"serial", s.Serial}, {"model", s.Model}, {"firmware", s.Firmware}} {
			if kv.v != "" {
				b.SetAttributeValue(kv.name, cty.StringVal(kv.v))
			}
		}
		if s.Version != "" && s.Version != DefaultVersion {
			b.SetAttributeValue("version", cty.StringVal(s.Version))
		}
		if s.CntlidMin != 0 && s.CntlidMin != DefaultCntlidMin {
			b.SetAttributeValue("cntlid_min", cty.NumberUIntVal(uint64(s.CntlidMin)))
		}
		if s.CntlidMax != 0 && s.CntlidMax != DefaultCntlidMax {
			b.SetAttributeValue("cntlid_max", cty.NumberUIntVal(uint64(s.CntlidMax)))
		}
		if s.QIDMax != 0 {
			b.SetAttributeValue("qid_max", cty.NumberUIntVal(uint64(s.QIDMax)))
		}
		if s.MaxControllers != 0 {
			b.SetAttributeValue("max_controllers", cty.NumberUIntVal(uint64(s.MaxControllers)))
		}
		if s.MaxControllersPerHost != 0 {
			b.SetAttributeValue("max_controllers_per_host", cty.NumberUIntVal(uint64(s.MaxControllersPerHost)))
		}
		for _, ns := range s.Namespaces {
			b.AppendNewline()
			nb := b.AppendNewBlock("namespace", []string{strconv.FormatUint(uint64(ns.NSID), 10)}).Body()
			if ns.Backend != "" {
				nb.SetAttributeValue("backend", cty.StringVal(ns.Backend))
			}
			if ns.DevicePath != "" {
				nb.SetAttributeValue("path", cty.StringVal(ns.DevicePath))
			}
			for _, kv := range []struct{ name, v string }{{"pool", ns.Pool}, {"image", ns.Image},
				{"ceph_conf", ns.CephConf}, {"client_id", ns.ClientID}, {"keyring", ns.Keyring}} {
				if kv.v != "" {
					nb.SetAttributeValue(kv.name, cty.StringVal(kv.v))
				}
			}
			if ns.Size != 0 {
				if fs := FormatSize(ns.Size); fs != strconv.FormatInt(ns.Size, 10) {
					nb.SetAttributeValue("size", cty.StringVal(fs))
				} else {
					nb.SetAttributeValue("size", cty.NumberIntVal(ns.Size))
				}
			}
			if ns.BlockSize != 0 {
				nb.SetAttributeValue("block_size", cty.NumberUIntVal(uint64(ns.BlockSize)))
			}
			if ns.Grow {
				nb.SetAttributeValue("grow", cty.True)
			}
			if !ns.DeviceUUID.IsZero() {
				nb.SetAttributeValue("uuid", cty.StringVal(ns.DeviceUUID.String()))
			}
			if !ns.DeviceNGUID.IsZero() {
				nb.SetAttributeValue("nguid", cty.StringVal(ns.DeviceNGUID.String()))
			}
			if !ns.DeviceEUI64.IsZero() {
				nb.SetAttributeValue("eui64", cty.StringVal(ns.DeviceEUI64.String()))
			}
			nb.SetAttributeValue("enabled", cty.BoolVal(ns.Enable))
			if ns.BufferedIO {
				nb.SetAttributeValue("buffered_io", cty.True)
			}
			if ns.QueueDepth != 0 {
				nb.SetAttributeValue("queue_depth", cty.NumberIntVal(int64(ns.QueueDepth)))
			}
			if ns.ResvEnable {
				nb.SetAttributeValue("resv_enable", cty.True)
			}
			if ns.ResvPTPLFile != "" {
				nb.SetAttributeValue("resv_ptpl_file", cty.StringVal(ns.ResvPTPLFile))
			}
			if g := ns.EffectiveANAGrpID(); g != DefaultANAGroup {
				nb.SetAttributeValue("ana_grpid", cty.NumberUIntVal(uint64(g)))
			}
		}
	}
	return hclwrite.Format(f.Bytes())
}

// writeANAGroupsHCL writes a port's ANA groups as ana_group blocks in
// grpid order, none when the only one is the default group optimized
// (what a port without them has).
func writeANAGroupsHCL(b *hclwrite.Body, groups []ANAGroup) {
	if len(groups) == 0 || len(groups) == 1 && groups[0] == (ANAGroup{GrpID: DefaultANAGroup, State: ANAOptimized}) {
		return
	}
	gs := slices.Clone(groups)
	sortANAGroups(gs)
	for _, g := range gs {
		gb := b.AppendNewBlock("ana_group", []string{strconv.FormatUint(uint64(g.GrpID), 10)}).Body()
		gb.SetAttributeValue("state", cty.StringVal(g.State))
	}
}

func stringList(ss []string) cty.Value {
	vs := make([]cty.Value, len(ss))
	for i, s := range ss {
		vs[i] = cty.StringVal(s)
	}
	return cty.ListVal(vs)
}
