package nvmeprint

import (
	"fmt"
	"io"
	"strings"

	"github.com/nvmeof/nvmeof/nvme"
)

// ANALog prints an ANA log page as nvme-cli 2.x does.
func ANALog(w io.Writer, format, devname string, l nvme.ANALog) error {
	if format == JSON {
		descs := make([]Obj, 0, len(l.Groups))
		for _, g := range l.Groups {
			nsids := make([]Obj, 0, len(g.NSIDs))
			for _, id := range g.NSIDs {
				nsids = append(nsids, Obj{{"nsid", id}})
			}
			descs = append(descs, Obj{
				{"grpid", g.GroupID},
				{"nnsids", len(g.NSIDs)},
				{"chgcnt", g.ChangeCount},
				{"state", anaStateString(g.State)},
				{"NSIDS", nsids},
			})
		}
		// "ANA DESC LIST " with its trailing space is nvme-cli's key.
		return WriteJSON(w, Obj{
			{"Asymmetric Namespace Access Log for NVMe device", devname},
			{"chgcnt", l.ChangeCount},
			{"ngrps", len(l.Groups)},
			{"ANA DESC LIST ", descs},
		})
	}
	var s strings.Builder
	fmt.Fprintf(&s, "Asymmetric Namespace Access Log for NVMe device: %s\n", devname)
	s.WriteString("ANA LOG HEADER :-\n")
	fmt.Fprintf(&s, "chgcnt\t:\t%d\n", l.ChangeCount)
	fmt.Fprintf(&s, "ngrps\t:\t%d\n", len(l.Groups))
	s.WriteString("ANA Log Desc :-\n")
	for _, g := range l.Groups {
		fmt.Fprintf(&s, "grpid\t:\t%d\n", g.GroupID)
		fmt.Fprintf(&s, "nnsids\t:\t%d\n", len(g.NSIDs))
		fmt.Fprintf(&s, "chgcnt\t:\t%d\n", g.ChangeCount)
		fmt.Fprintf(&s, "state\t:\t%s\n", anaStateString(g.State))
		for _, id := range g.NSIDs {
			fmt.Fprintf(&s, "\tnsid\t:\t%d\n", id)
		}
		s.WriteString("\n")
	}
	_, err := io.WriteString(w, s.String())
	return err
}

// anaStateString names a state as nvme-cli does ("invalid state" for
// the values the specification does not define).
func anaStateString(st nvme.ANAState) string {
	switch st {
	case nvme.ANAOptimized, nvme.ANANonOptimized, nvme.ANAInaccessible, nvme.ANAPersistentLoss, nvme.ANAChange:
		return st.String()
	}
	return "invalid state"
}
