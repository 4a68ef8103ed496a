package configfs

import (
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"testing"
)

// FuzzNvmetcliKeys: any input gives errors or a tree, never a panic; the
// key walk agrees with the decoder on what is JSON.
//
// The input is not the document itself but edits of a real one (the shape
// `nvmetcli save` writes, examples/nvmetcli.json and small documents of
// the cases the key rules single out): ops picks nodes of the document
// and replaces, renames, deletes or duplicates them with s and n, and
// trunc may cut the result. Raw bytes mostly fail at the first brace,
// and the fuzzing engine stalls for up to a minute minimizing each long
// []byte it finds interesting; here every execution is a document of the
// right shape, with its keys, values and nesting changed where the key
// rules look.
func FuzzNvmetcliKeys(f *testing.F) {
	example, err := os.ReadFile("../examples/nvmetcli.json")
	if err != nil {
		f.Fatal(err)
	}
	var bases [][]byte
	for _, doc := range [][]byte{
		[]byte(savedJSON),
		example,
		[]byte(`{"subsystems": [{"nqn": "x", "attr": {"alow_any_host": 1, "pi_enable": true}}]}`),
		[]byte(`{"ports": [{"ana_groups": [{"grpid": 2, "ana": {"state": "x"}}], "param": {"max_queue_size": 4}}]}`),
		[]byte(`{"ports": [{"portid": 1, "addr": {"trtype": "loop"}, "ana_groups": [{"grpid": 1, "ana": {"state": "inaccessible"}}, {"grpid": "2"}]}],
 "subsystems": [{"nqn": "nqn.2026-11.io.nvmeof:a", "namespaces": [{"nsid": 1, "device": {"path": "/x"}, "ana_grpid": 2, "ana": {"grpid": "3"}}]}]}`),
	} {
		if _, ok := parseJNodes(doc); !ok {
			f.Fatalf("seed document is not JSON: %s", doc)
		}
		bases = append(bases, doc)
	}
	for i := range bases {
		f.Add(uint8(i), []byte{}, "", int64(0), uint16(0))
	}
	f.Add(uint8(0), []byte{5, 4, 9, 0}, "alow_any_host", int64(1), uint16(0))
	f.Add(uint8(0), []byte{30, 1, 31, 7, 40, 5}, "rdma", int64(-1), uint16(0))
	f.Add(uint8(1), []byte{12, 6, 3, 2}, "pi_enable", int64(4096), uint16(0))
	f.Add(uint8(4), []byte{2, 3, 7, 0}, "optimized", int64(1<<40), uint16(77))
	f.Add(uint8(2), []byte{}, "", int64(0), uint16(20))
	f.Fuzz(func(t *testing.T, pick uint8, ops []byte, s string, n int64, trunc uint16) {
		data := editJSON(bases[int(pick)%len(bases)], ops, s, n)
		if trunc != 0 {
			data = data[:int(trunc)%(len(data)+1)]
		}
		errs, warns := checkNvmetcliKeys(data, "f.json")
		for _, e := range append(errs, warns...) {
			if e.Range == nil || e.Range.Start.Line < 1 || e.Range.Start.Byte > len(data) {
				t.Fatalf("bad position %+v for %q", e.Range, data)
			}
		}
		_, _ = ParseNvmetcliJSON(data, "f.json")
	})
}

// jslot is a node of a document and where it sits: a key of an object or
// an index of an array.
type jslot struct {
	n      *jnode
	parent *jnode
	key    string
	index  int
}

// slots lists the document's nodes in document order.
func slots(root *jnode) []jslot {
	out := []jslot{{n: root}}
	var walk func(n *jnode)
	walk = func(n *jnode) {
		switch n.kind {
		case jObject:
			for _, k := range n.keys {
				if c := n.obj[k]; c != nil {
					out = append(out, jslot{n: c, parent: n, key: k})
					walk(c)
				}
			}
		case jArray:
			for i, c := range n.arr {
				out = append(out, jslot{n: c, parent: n, index: i})
				walk(c)
			}
		}
	}
	walk(root)
	return out
}

// maxEditNodes bounds the documents editJSON makes.
const maxEditNodes = 2000

// editJSON applies ops to the document doc, two bytes each: which node
// (modulo the node count) and what to do with it, using s and n as the
// new key or value.
func editJSON(doc []byte, ops []byte, s string, n int64) []byte {
	root, ok := parseJNodes(doc)
	if !ok {
		return doc
	}
	for ; len(ops) >= 2; ops = ops[2:] {
		all := slots(root)
		sl := all[int(ops[0])%len(all)]
		op := ops[1] % 8
		if op >= 6 && len(all) > maxEditNodes {
			continue // duplicating shared subtrees could double the size at every step
		}
		switch op {
		case 0: // a string
			*sl.n = jnode{kind: jScalar, val: s}
		case 1: // a number
			*sl.n = jnode{kind: jScalar, val: json.Number(strconv.FormatInt(n, 10))}
		case 2: // a number as nvmetcli writes it, in a string
			*sl.n = jnode{kind: jScalar, val: strconv.FormatInt(n, 10)}
		case 3: // true, false or null
			v := []any{true, false, nil}[uint64(n)%3]
			*sl.n = jnode{kind: jScalar, val: v}
		case 4: // renamed
			if sl.parent != nil && sl.parent.kind == jObject {
				renameKey(sl.parent, sl.key, s)
			}
		case 5: // deleted
			if sl.parent != nil {
				deleteSlot(sl)
			}
		case 6: // duplicated: another element, or the value under key s
			if p := sl.parent; p != nil && p.kind == jArray {
				p.arr = append(p.arr, sl.n)
			} else if p != nil {
				if _, dup := p.obj[s]; !dup {
					p.keys = append(p.keys, s)
				}
				p.obj[s] = sl.n
			}
		case 7: // an empty object or array, or the document in an array
			switch uint64(n) % 3 {
			case 0:
				*sl.n = jnode{kind: jObject, obj: map[string]*jnode{}}
			case 1:
				*sl.n = jnode{kind: jArray}
			default:
				c := *sl.n
				*sl.n = jnode{kind: jArray, arr: []*jnode{&c}}
			}
		}
	}
	var b bytes.Buffer
	encodeJNode(&b, root)
	return b.Bytes()
}

func renameKey(p *jnode, from, to string) {
	if _, dup := p.obj[to]; dup || from == to {
		return
	}
	for i, k := range p.keys {
		if k == from {
			p.keys[i] = to
		}
	}
	p.obj[to] = p.obj[from]
	delete(p.obj, from)
}

func deleteSlot(sl jslot) {
	p := sl.parent
	if p.kind == jArray {
		p.arr = append(p.arr[:sl.index:sl.index], p.arr[sl.index+1:]...)
		return
	}
	delete(p.obj, sl.key)
	keys := p.keys[:0:0]
	for _, k := range p.keys {
		if k != sl.key {
			keys = append(keys, k)
		}
	}
	p.keys = keys
}

// encodeJNode writes n as JSON, keys in document order, indented one key
// a line so that reported positions have lines to point at.
func encodeJNode(b *bytes.Buffer, n *jnode) {
	switch n.kind {
	case jObject:
		b.WriteString("{")
		first := true
		for _, k := range n.keys {
			c := n.obj[k]
			if c == nil {
				continue
			}
			if !first {
				b.WriteString(",")
			}
			first = false
			kb, _ := json.Marshal(k)
			b.WriteString("\n")
			b.Write(kb)
			b.WriteString(": ")
			encodeJNode(b, c)
		}
		b.WriteString("}")
	case jArray:
		b.WriteString("[")
		for i, c := range n.arr {
			if i > 0 {
				b.WriteString(", ")
			}
			encodeJNode(b, c)
		}
		b.WriteString("]")
	default:
		v, err := json.Marshal(n.val)
		if err != nil {
			v = []byte("0")
		}
		b.Write(v)
	}
}
