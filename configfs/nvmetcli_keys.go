package configfs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/nvmeof/nvmeof/internal/suggest"
)

// Every key of nvmetcli JSON is accounted for, as every HCL attribute is:
// encoding/json drops keys it has no field for, so checkNvmetcliKeys walks
// the document again and reports each key the loader does not apply, at
// its JSON path and line:col. What it reports:
//
//   - a key no version of nvmetcli or nvmetd writes (a typo such as
//     "alow_any_host"): an error, with the closest known key;
//   - a kernel attribute we do not implement, set to a value whose loss
//     changes what hosts rely on (protection information, a non-RC RDMA
//     queue pair type): an error;
//   - a kernel attribute we do not implement whose loss changes only what
//     hosts are told or a tuning (a non-zero ieee_oui, max_queue_size): a
//     warning (Tree.Warnings);
//   - such attributes at their kernel defaults, which `nvmetcli save`
//     writes for every object: nothing, they mean what nvmetd does.

// jnode is a JSON value with the byte offset where it starts.
type jnode struct {
	off  int64
	keys []string // object keys in document order
	obj  map[string]*jnode
	arr  []*jnode
	val  any // scalars: string, json.Number, bool or nil
	kind byte
}

// JSON value kinds of jnode.
const (
	jObject byte = '{'
	jArray  byte = '['
	jScalar byte = 's'
)

// parseJNodes decodes data into jnodes; ok is false when it is not JSON or
// nests deeper than 64 levels (the typed decoder reports the former).
func parseJNodes(data []byte) (*jnode, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var walk func(depth int) (*jnode, bool)
	walk = func(depth int) (*jnode, bool) {
		if depth > 64 {
			return nil, false
		}
		off := dec.InputOffset()
		for off < int64(len(data)) && bytes.IndexByte([]byte(" \t\r\n:,"), data[off]) >= 0 {
			off++
		}
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		n := &jnode{off: off, kind: jScalar, val: tok}
		switch tok {
		case json.Delim('{'):
			n.kind, n.val, n.obj = jObject, nil, map[string]*jnode{}
			for dec.More() {
				k, err := dec.Token()
				key, ok := k.(string)
				if err != nil || !ok {
					return nil, false
				}
				v, ok := walk(depth + 1)
				if !ok {
					return nil, false
				}
				if _, dup := n.obj[key]; !dup {
					n.keys = append(n.keys, key)
				}
				n.obj[key] = v
			}
			_, err = dec.Token()
		case json.Delim('['):
			n.kind, n.val = jArray, nil
			for dec.More() {
				v, ok := walk(depth + 1)
				if !ok {
					return nil, false
				}
				n.arr = append(n.arr, v)
			}
			_, err = dec.Token()
		}
		return n, err == nil
	}
	return walk(0)
}

// text is a scalar's value as nvmetcli would write it to configfs: strings
// as they are, numbers in their JSON spelling, booleans as 1 and 0, null
// as "". Objects and arrays give "".
func (n *jnode) text() string {
	switch v := n.val.(type) {
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		if v {
			return "1"
		}
		return "0"
	}
	return ""
}

// keyRule checks the value of one key; path is the key's JSON path.
type keyRule func(k *keyChecker, n *jnode, path string)

// keyChecker collects what checkNvmetcliKeys reports.
type keyChecker struct {
	data     []byte
	filename string
	errs     Errors
	warns    Errors
}

// report records an error (or a warning) about the value n at path.
func (k *keyChecker) report(warn bool, n *jnode, path, format string, args ...any) {
	e := &Error{Msg: fmt.Sprintf(format, args...)}
	e.Path, e.Attr = splitJSONPath(path)
	p := jsonPos(k.data, n.off)
	e.Range = &hcl.Range{Filename: k.filename, Start: p, End: p}
	if warn {
		k.warns = append(k.warns, e)
	} else {
		k.errs = append(k.errs, e)
	}
}

// splitJSONPath splits "subsystems[0].attr.pi_enable" into the object's
// path and the key, as Error's Path and Attr.
func splitJSONPath(path string) (string, string) {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i], path[i+1:]
	}
	return "", path
}

// object checks the keys of n (when it is an object) against rules.
func (k *keyChecker) object(n *jnode, path string, rules map[string]keyRule) {
	if n == nil || n.kind != jObject {
		return // the typed decoder reports wrong types
	}
	for _, key := range n.keys {
		kp := key
		if path != "" {
			kp = path + "." + key
		}
		rule, ok := rules[key]
		if !ok {
			msg := "unknown key, not applied"
			if s := closestKey(key, rules); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			} else {
				msg += " (known here: " + strings.Join(sortedKeys(rules), ", ") + ")"
			}
			k.report(false, n.obj[key], kp, "%s", msg)
			continue
		}
		if rule != nil {
			rule(k, n.obj[key], kp)
		}
	}
}

// applied is the rule of keys the loader applies (nil: nothing more to
// check here).
var applied keyRule

// objectOf checks an object's keys against rules.
func objectOf(rules map[string]keyRule) keyRule {
	return func(k *keyChecker, n *jnode, path string) { k.object(n, path, rules) }
}

// arrayOf checks each element of an array of objects against rules.
func arrayOf(rules map[string]keyRule) keyRule {
	return func(k *keyChecker, n *jnode, path string) {
		if n.kind != jArray {
			return
		}
		for i, e := range n.arr {
			k.object(e, path+"["+strconv.Itoa(i)+"]", rules)
		}
	}
}

// refuseTrue is the rule of a kernel boolean nvmetd does not implement
// whose true value hosts rely on: false (or empty) is what nvmetd does.
func refuseTrue(what string) keyRule {
	return func(k *keyChecker, n *jnode, path string) {
		v := n.text()
		if v == "" {
			return
		}
		b, err := parseKernelBool(v)
		switch {
		case err != nil:
			k.report(false, n, path, "%v", err)
		case b:
			k.report(false, n, path, "%q: %s is not supported by nvmetd; set it to \"0\" or remove it", v, what)
		}
	}
}

// warnUnless is the rule of a kernel attribute nvmetd does not implement
// whose loss changes only a tuning or what hosts are told: a value other
// than the defaults is ignored with a warning.
func warnUnless(why string, defaults ...string) keyRule {
	return func(k *keyChecker, n *jnode, path string) {
		v := n.text()
		if v == "" || slices.Contains(defaults, strings.ToLower(v)) {
			return
		}
		k.report(true, n, path, "%q ignored: %s", v, why)
	}
}

// Keys of nvmetcli JSON, by object; nil rules are applied as read.
var (
	nvmeofNSKeys = map[string]keyRule{"backend": applied, "block_size": applied, "buffered_io": applied, "queue_depth": applied, "eui64": applied, "grow": applied, "size": applied, "resv_ptpl_file": applied,
		"pool": applied, "image": applied, "ceph_conf": applied, "client_id": applied, "keyring": applied}
	nvmeofPortKeys = map[string]keyRule{"connect_timeout": applied, "device": applied, "max_pending": applied, "max_pending_per_host": applied,
		"name": applied, "provider": applied, "tos": applied}
	nsKeys = map[string]keyRule{
		"ana":       objectOf(map[string]keyRule{"grpid": applied}),
		"ana_grpid": applied,
		"device":    objectOf(map[string]keyRule{"nguid": applied, "path": applied, "uuid": applied}),
		"enable":    applied,
		"nsid":      applied,
		"nvmeof":    objectOf(nvmeofNSKeys),
		"resv":      objectOf(map[string]keyRule{"enable": applied}),
	}
	subsysAttrKeys = map[string]keyRule{
		"allow_any_host": applied, "cntlid_max": applied, "cntlid_min": applied, "firmware": applied, "model": applied,
		"qid_max": applied, "serial": applied, "version": applied,
		"ieee_oui":  warnUnless("nvmetd reports IEEE OUI 0 in Identify Controller", "0", "0x0", "0x000000"),
		"pi_enable": refuseTrue("end-to-end protection information (attr_pi_enable)"),
	}
	subsysKeys = map[string]keyRule{
		"allowed_hosts": applied, "attr": objectOf(subsysAttrKeys), "namespaces": namespacesRule, "nqn": applied,
		"passthru": applied, // refused by the loader when not empty
	}
	portKeys = map[string]keyRule{
		"addr": objectOf(map[string]keyRule{"adrfam": applied, "traddr": applied, "treq": applied, "trsvcid": applied, "trtype": applied,
			"tsas": tsasRule}),
		"ana_groups": arrayOf(anaGroupKeys),
		"nvmeof":     objectOf(nvmeofPortKeys),
		"param": objectOf(map[string]keyRule{
			"inline_data_size": applied,
			"max_queue_size":   warnUnless("nvmetd's RDMA ports take queues of up to 128 entries, as nvmet-rdma's default", "-1", "0"),
			"pi_enable":        refuseTrue("end-to-end protection information (param_pi_enable)"),
		}),
		"portid":     applied,
		"referrals":  applied, // refused by the loader when not empty
		"subsystems": applied,
	}
	anaGroupKeys = map[string]keyRule{"ana": objectOf(map[string]keyRule{"state": applied}), "grpid": applied}
	hostKeys     = map[string]keyRule{
		"nqn":    applied,
		"attr":   objectOf(map[string]keyRule{"dhchap_key": applied, "dhchap_ctrl_key": applied, "dhchap_hash": applied, "dhchap_dhgroup": applied}),
		"dhchap": objectOf(map[string]keyRule{"key": applied, "ctrl_key": applied, "hash": applied, "dhgroup": applied}),
	}
	rootKeys = map[string]keyRule{"hosts": arrayOf(hostKeys), "ports": arrayOf(portKeys), "subsystems": arrayOf(subsysKeys)}
)

// tsasRule: the transport-specific address subtype. nvmetd serves RDMA
// reliable connected queue pairs ("connected") and TCP without TLS
// ("none"); Linux's "tls1.3" needs TLS with external pre-shared keys,
// which Go's crypto/tls lacks (docs/tcp.md).
func tsasRule(k *keyChecker, n *jnode, path string) {
	switch v := strings.ToLower(n.text()); v {
	case "", "none", "not specified", "not required", "connected":
	case "tls1.3":
		k.report(false, n, path, "%q: nvmetd serves NVMe/TCP without TLS only (tsas \"none\")", n.text())
	default:
		k.report(false, n, path, "%q: nvmetd serves RDMA reliable connected queue pairs (tsas \"connected\") and TCP without TLS (\"none\")", n.text())
	}
}

// namespacesRule checks a subsystem's namespaces against nsKeys, and
// warns about an "ana" grpid that ana_grpid overrides (nvmetcli restore
// writes ana_grpid last): a hand edit of the one the loader ignores.
func namespacesRule(k *keyChecker, n *jnode, path string) {
	arrayOf(nsKeys)(k, n, path)
	if n.kind != jArray {
		return
	}
	for i, e := range n.arr {
		if e.kind != jObject || e.obj["ana_grpid"] == nil || e.obj["ana"] == nil || e.obj["ana"].kind != jObject {
			continue
		}
		id, grp := e.obj["ana_grpid"], e.obj["ana"].obj["grpid"]
		if grp == nil {
			continue
		}
		a, errA := strconv.ParseInt(id.text(), 10, 64)
		b, errB := strconv.ParseInt(grp.text(), 10, 64)
		if errA == nil && errB == nil && a != b {
			k.report(true, grp, path+"["+strconv.Itoa(i)+"].ana.grpid", "%q ignored: ana_grpid %d wins, as in nvmetcli restore", grp.text(), a)
		}
	}
}

// checkNvmetcliKeys reports the keys of nvmetcli JSON data the loader does
// not apply (see the top of this file), placed at their line:col in
// filename. It reports nothing when data is not JSON (the decoder's error
// says why).
func checkNvmetcliKeys(data []byte, filename string) (errs, warns Errors) {
	root, ok := parseJNodes(data)
	if !ok {
		return nil, nil
	}
	k := &keyChecker{data: data, filename: filename}
	k.object(root, "", rootKeys)
	return k.errs, k.warns
}

// closestKey returns the key of rules closest to key (in any case) when
// it is close enough to be a typo, else "".
func closestKey(key string, rules map[string]keyRule) string {
	ks := sortedKeys(rules)
	if i := suggest.Within(strings.ToLower(key), ks, suggest.MaxEdits(key)); i >= 0 {
		return ks[i]
	}
	return ""
}

func sortedKeys(rules map[string]keyRule) []string {
	ks := make([]string, 0, len(rules))
	for k := range rules {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
