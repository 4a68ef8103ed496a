package configfs

import (
	"bytes"
	"encoding/json"
	"strconv"

	"github.com/hashicorp/hcl/v2"
)

// JSON positions: nvmetcli JSON trees carry no per-object source, so that
// validation reports them by file and path as before; a program's errors
// about a namespace or a port (Tree.NamespaceError, Tree.PortError) get
// the line of the value they are about by walking the tree's JSON again
// (jsonPlaces), on that error path only: a source whose attrs map holds,
// under the keys of jsonKey, where each value is.

// jsonKey is the key in a JSON tree's source of attribute attr (a configfs
// name; "" for the object) of the object of kind ("ns" or "port") named
// id.
func jsonKey(kind, id, attr string) string { return "json " + kind + " " + id + " " + attr }

// jsonAttrPaths maps configfs attributes onto their place in nvmetcli's
// JSON objects.
var (
	jsonNSPaths   = map[string]string{"device_path": "device/path", "size": "nvmeof/size", "block_size": "nvmeof/block_size", "backend": "nvmeof/backend"}
	jsonPortPaths = map[string]string{"addr_traddr": "addr/traddr", "addr_trsvcid": "addr/trsvcid", "addr_trtype": "addr/trtype", "provider": "nvmeof/provider", "device": "nvmeof/device"}
)

// jsonPlaces returns the places of a tree loaded from nvmetcli JSON, for
// an error about an object whose own source is src: where each namespace
// and port and some of their attributes are. Nil when the object has a
// source, the tree came from no JSON, or its JSON cannot be walked.
func (t *Tree) jsonPlaces(src *source) *source {
	if src != nil || t.json == nil {
		return nil
	}
	var cfg nvmetcliConfig
	if json.NewDecoder(bytes.NewReader(t.json)).Decode(&cfg) != nil { // as ParseNvmetcliJSON
		return nil
	}
	return jsonPlaces(t.json, t.file, &cfg)
}

// jsonPlaces returns the places of data (decoded as cfg; see
// Tree.jsonPlaces).
func jsonPlaces(data []byte, filename string, cfg *nvmetcliConfig) *source {
	offs, ok := jsonOffsets(data)
	if !ok {
		return nil
	}
	src := &source{attrs: map[string]srcAttr{}}
	place := func(key, name, path string) {
		off, ok := offs[path]
		if !ok {
			return
		}
		p := jsonPos(data, off)
		src.attrs[key] = srcAttr{name: name, rng: hcl.Range{Filename: filename, Start: p, End: p}}
	}
	for i, js := range cfg.Subsystems {
		for j, jn := range js.Namespaces {
			if jn.NSID == nil {
				continue
			}
			id := js.NQN + "/" + strconv.FormatInt(int64(*jn.NSID), 10)
			obj := "/subsystems/" + strconv.Itoa(i) + "/namespaces/" + strconv.Itoa(j)
			place(jsonKey("ns", id, ""), "", obj)
			for attr, p := range jsonNSPaths {
				place(jsonKey("ns", id, attr), attr, obj+"/"+p)
			}
		}
	}
	for i, jp := range cfg.Ports {
		if jp.PortID == nil {
			continue
		}
		id := strconv.FormatInt(int64(*jp.PortID), 10)
		if jp.Nvmeof != nil && jp.Nvmeof.Name != "" {
			id = jp.Nvmeof.Name
		}
		obj := "/ports/" + strconv.Itoa(i)
		place(jsonKey("port", id, ""), "", obj)
		for attr, p := range jsonPortPaths {
			place(jsonKey("port", id, attr), attr, obj+"/"+p)
		}
	}
	return src
}

// jsonOffsets returns the byte offset where each value of data starts, by
// its path ("/ports/0/addr/traddr"; "" for the whole document).
func jsonOffsets(data []byte) (map[string]int64, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	offs := map[string]int64{}
	var walk func(path string, depth int) bool
	walk = func(path string, depth int) bool {
		if depth > 64 {
			return false
		}
		off := dec.InputOffset()
		for off < int64(len(data)) && bytes.IndexByte([]byte(" \t\r\n:,"), data[off]) >= 0 {
			off++
		}
		offs[path] = off
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			for dec.More() {
				k, err := dec.Token()
				key, ok := k.(string)
				if err != nil || !ok || !walk(path+"/"+key, depth+1) {
					return false
				}
			}
			_, err = dec.Token()
		case json.Delim('['):
			for i := 0; dec.More(); i++ {
				if !walk(path+"/"+strconv.Itoa(i), depth+1) {
					return false
				}
			}
			_, err = dec.Token()
		}
		return err == nil
	}
	return offs, walk("", 0)
}

// jsonPos is the line and column of byte offset off of data.
func jsonPos(data []byte, off int64) hcl.Pos {
	off = min(max(off, 0), int64(len(data)))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := int(off) - bytes.LastIndexByte(data[:off], '\n')
	return hcl.Pos{Line: line, Column: col, Byte: int(off)}
}
