package configfs

// Detached returns a deep copy of the tree without its source: errors
// about it (Validate, Tree.NamespaceError) name the object by its configfs
// path and the attribute by its HCL name, with no file position. A tree changed
// by a program (the control API of cmd/nvmetd) no longer matches the file
// it came from, so positions in that file would mislead.
func (t *Tree) Detached() *Tree {
	c := t.Clone()
	if c == nil {
		return nil
	}
	c.src, c.file, c.json = &source{}, "", nil
	for _, p := range c.Ports {
		p.src = &source{}
	}
	for _, s := range c.Subsystems {
		s.src = &source{}
		for _, ns := range s.Namespaces {
			ns.src = &source{}
		}
	}
	for _, h := range c.Hosts {
		h.src = &source{}
	}
	return c
}
