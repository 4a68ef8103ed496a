package configfs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"

	"github.com/nvmeof/nvmeof/nvme/auth"
)

// Secret is a DH-HMAC-CHAP secret as written in the configuration
// ("DHHC-1:..."). It formats as "[redacted]" so that printing a Host does
// not show it; Tree.HCL and Tree.NvmetcliJSON write it as it was given.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts the secret.
func (s Secret) GoString() string { return `configfs.Secret("[redacted]")` }

// Format redacts the secret for every verb.
func (s Secret) Format(f fmt.State, verb rune) { _, _ = io.WriteString(f, s.String()) }

// Host attributes: configfs name to HCL name (the same; the *_file ones
// are nvmetd's: the secret is read from a file at load).
var hostHCLNames = map[string]string{
	"dhchap_key": "dhchap_key", "dhchap_key_file": "dhchap_key_file",
	"dhchap_ctrl_key": "dhchap_ctrl_key", "dhchap_ctrl_key_file": "dhchap_ctrl_key_file",
	"dhchap_hash": "dhchap_hash", "dhchap_dhgroup": "dhchap_dhgroup",
}

var hostAttrs = invert(hostHCLNames)

// Defaults of the kernel's hosts/<nqn>/dhchap_hash and dhchap_dhgroup.
const (
	DefaultDHCHAPHash    = "hmac(sha256)"
	DefaultDHCHAPDHGroup = "null"
)

// HasDHCHAP reports whether the host authenticates (it has a dhchap_key).
func (h *Host) HasDHCHAP() bool { return h.DHCHAPKey != "" }

// EffectiveDHCHAPHash returns dhchap_hash or its default.
func (h *Host) EffectiveDHCHAPHash() string {
	if h.DHCHAPHash == "" {
		return DefaultDHCHAPHash
	}
	return h.DHCHAPHash
}

// EffectiveDHCHAPDHGroup returns dhchap_dhgroup or its default.
func (h *Host) EffectiveDHCHAPDHGroup() string {
	if h.DHCHAPDHGroup == "" {
		return DefaultDHCHAPDHGroup
	}
	return h.DHCHAPDHGroup
}

// authEqual reports whether two hosts have the same DH-HMAC-CHAP settings.
func (h *Host) authEqual(o *Host) bool {
	return h.DHCHAPKey == o.DHCHAPKey && h.DHCHAPCtrlKey == o.DHCHAPCtrlKey &&
		h.EffectiveDHCHAPHash() == o.EffectiveDHCHAPHash() && h.EffectiveDHCHAPDHGroup() == o.EffectiveDHCHAPDHGroup()
}

// setAuth sets the host's DH-HMAC-CHAP attribute name (a kernel file
// name: dhchap_key, dhchap_ctrl_key, dhchap_hash, dhchap_dhgroup) to v;
// it ignores other names.
func (h *Host) setAuth(name, v string) {
	switch name {
	case "dhchap_key":
		h.DHCHAPKey = Secret(strings.TrimSpace(v))
	case "dhchap_ctrl_key":
		h.DHCHAPCtrlKey = Secret(strings.TrimSpace(v))
	case "dhchap_hash":
		h.DHCHAPHash = v
	case "dhchap_dhgroup":
		h.DHCHAPDHGroup = v
	}
}

// hostBody decodes a host block's attributes.
func (d *hclDecoder) hostBody(h *Host, content *hcl.BodyContent) {
	path := "hosts/" + h.NQN
	for name, a := range content.Attributes {
		v, ok := d.str(h.src, path, a)
		if !ok {
			continue
		}
		switch name {
		case "dhchap_key_file":
			if key, ok := d.keyFile(h.src, path, a, v); ok {
				h.DHCHAPKeyFile, h.DHCHAPKey = v, key
			}
		case "dhchap_ctrl_key_file":
			if key, ok := d.keyFile(h.src, path, a, v); ok {
				h.DHCHAPCtrlKeyFile, h.DHCHAPCtrlKey = v, key
			}
		default:
			h.setAuth(name, v)
		}
	}
	if content.Attributes["dhchap_key"] != nil && content.Attributes["dhchap_key_file"] != nil {
		d.attrErr(h.src, path, content.Attributes["dhchap_key_file"], "dhchap_key and dhchap_key_file are both set")
	}
	if content.Attributes["dhchap_ctrl_key"] != nil && content.Attributes["dhchap_ctrl_key_file"] != nil {
		d.attrErr(h.src, path, content.Attributes["dhchap_ctrl_key_file"], "dhchap_ctrl_key and dhchap_ctrl_key_file are both set")
	}
}

// keyFile reads the secret file named file by attribute a, relative to
// the configuration file's directory. A file that group or others may
// read or write is refused, as ssh refuses such private keys.
func (d *hclDecoder) keyFile(src *source, path string, a *hcl.Attribute, file string) (Secret, bool) {
	p := file
	if !filepath.IsAbs(p) {
		p = filepath.Join(d.dir, p)
	}
	fi, err := os.Stat(p)
	if err != nil {
		d.attrErr(src, path, a, "%v", err)
		return "", false
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		d.attrErr(src, path, a, "key file %s is accessible by group or others (mode %04o): chmod 600 it", p, perm)
		return "", false
	}
	if !fi.Mode().IsRegular() {
		d.attrErr(src, path, a, "key file %s is not a regular file", p)
		return "", false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		d.attrErr(src, path, a, "%v", err)
		return "", false
	}
	return Secret(strings.TrimSpace(string(b))), true
}

// validateAuth checks a host's DH-HMAC-CHAP attributes. Errors name the
// attribute (the *_file one when the secret came from a file), never the
// secret.
func (h *Host) validateAuth(c *collector, path string) {
	keyAttr := func(file string, name string) string {
		if file != "" {
			return name + "_file"
		}
		return name
	}
	if h.DHCHAPKey != "" {
		if _, err := auth.ParseKey(string(h.DHCHAPKey)); err != nil {
			c.add(h.src, hostHCLNames, path, keyAttr(h.DHCHAPKeyFile, "dhchap_key"), "%v", err)
		}
	} else if h.DHCHAPKeyFile != "" {
		c.add(h.src, hostHCLNames, path, "dhchap_key_file", "key file %s is empty", h.DHCHAPKeyFile)
	}
	if h.DHCHAPCtrlKey != "" {
		if _, err := auth.ParseKey(string(h.DHCHAPCtrlKey)); err != nil {
			c.add(h.src, hostHCLNames, path, keyAttr(h.DHCHAPCtrlKeyFile, "dhchap_ctrl_key"), "%v", err)
		}
		if h.DHCHAPKey == "" {
			c.add(h.src, hostHCLNames, path, keyAttr(h.DHCHAPCtrlKeyFile, "dhchap_ctrl_key"), "a controller key needs dhchap_key (bidirectional authentication)")
		}
	}
	if h.DHCHAPHash != "" {
		if _, err := auth.ParseHash(h.DHCHAPHash); err != nil {
			c.add(h.src, hostHCLNames, path, "dhchap_hash", "%v", err)
		}
	}
	if h.DHCHAPDHGroup != "" {
		if _, err := auth.ParseDHGroup(h.DHCHAPDHGroup); err != nil {
			c.add(h.src, hostHCLNames, path, "dhchap_dhgroup", "%v", err)
		}
	}
}

// writeAuthHCL writes the host's DH-HMAC-CHAP attributes as they were
// given: a secret read from a file as its file name.
func (h *Host) writeAuthHCL(b *hclwrite.Body) {
	switch {
	case h.DHCHAPKeyFile != "":
		b.SetAttributeValue("dhchap_key_file", cty.StringVal(h.DHCHAPKeyFile))
	case h.DHCHAPKey != "":
		b.SetAttributeValue("dhchap_key", cty.StringVal(string(h.DHCHAPKey)))
	}
	switch {
	case h.DHCHAPCtrlKeyFile != "":
		b.SetAttributeValue("dhchap_ctrl_key_file", cty.StringVal(h.DHCHAPCtrlKeyFile))
	case h.DHCHAPCtrlKey != "":
		b.SetAttributeValue("dhchap_ctrl_key", cty.StringVal(string(h.DHCHAPCtrlKey)))
	}
	if h.DHCHAPHash != "" {
		b.SetAttributeValue("dhchap_hash", cty.StringVal(h.DHCHAPHash))
	}
	if h.DHCHAPDHGroup != "" {
		b.SetAttributeValue("dhchap_dhgroup", cty.StringVal(h.DHCHAPDHGroup))
	}
}

// hostFromJSON sets a host's attributes from nvmetcli JSON: "attr" holds
// the kernel's file names (dhchap_key, dhchap_ctrl_key, dhchap_hash,
// dhchap_dhgroup).
func hostFromJSON(h *Host, attr map[string]jsonString) {
	for k, v := range attr {
		h.setAuth(k, string(v))
	}
}

// hostJSONAttr returns the host's "attr" object for nvmetcli JSON, nil
// when it has no DH-HMAC-CHAP settings. Secrets from files are written
// inline: the kernel's configfs has no file attribute.
func hostJSONAttr(h *Host) map[string]jsonString {
	if h.DHCHAPKey == "" && h.DHCHAPCtrlKey == "" && h.DHCHAPHash == "" && h.DHCHAPDHGroup == "" {
		return nil
	}
	m := map[string]jsonString{}
	if h.DHCHAPKey != "" {
		m["dhchap_key"] = jsonString(h.DHCHAPKey)
	}
	if h.DHCHAPCtrlKey != "" {
		m["dhchap_ctrl_key"] = jsonString(h.DHCHAPCtrlKey)
	}
	m["dhchap_hash"] = jsonString(h.EffectiveDHCHAPHash())
	m["dhchap_dhgroup"] = jsonString(h.EffectiveDHCHAPDHGroup())
	return m
}
