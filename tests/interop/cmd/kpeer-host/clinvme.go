package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// cliFunc runs the nvmeof command with a bound (cliChecks' cli).
type cliFunc func(bound time.Duration, args ...string) (stdout, stderr string, code int, el time.Duration)

// cliNVMeChecks runs nvme-cli's admin commands through the nvmeof command
// on controller dev, connected to the kernel target (issue 13): list-subsys,
// get-log, error-log, ns-descs, get-feature and reset, checking values the
// kernel's nvmet gives (its Error Information log of ELPE+1 entries, the
// namespace UUID, KATO in ms) and that the controller is live again after
// the reset.
func (r *run) cliNVMeChecks(cli cliFunc, dev string) {
	c := r.cfg
	ok := func(args ...string) (string, bool) {
		out, errOut, code, _ := cli(60*time.Second, args...)
		if code != 0 {
			r.fail("nvmeof %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(errOut))
			return out, false
		}
		return out, true
	}

	r.step("nvmeof list-subsys")
	if out, good := ok("list-subsys", "-o", "json"); good {
		var js []struct {
			Subsystems []struct {
				NQN   string
				Paths []struct{ Name, Transport, Address, State string }
			}
		}
		switch err := json.Unmarshal([]byte(out), &js); {
		case err != nil:
			r.fail("list-subsys -o json: %v", err)
		case len(js) != 1 || len(js[0].Subsystems) != 1 || js[0].Subsystems[0].NQN != c.nqn || len(js[0].Subsystems[0].Paths) != 1:
			r.fail("list-subsys -o json: %+v, want %s with one controller", js, c.nqn)
		default:
			p := js[0].Subsystems[0].Paths[0]
			if p.Name != dev || p.Transport != "rdma" || p.State != "live" || !strings.Contains(p.Address, "traddr="+c.traddr) {
				r.fail("list-subsys path %+v", p)
			} else {
				r.pass("list-subsys: %s %s %s %s", p.Name, p.Transport, p.Address, p.State)
			}
		}
	}
	if out, good := ok("list-subsys"); good && !strings.Contains(out, " +- "+dev+" rdma traddr="+c.traddr) {
		r.fail("list-subsys: %q", out)
	}

	r.step("nvmeof get-log / error-log")
	if out, good := ok("get-log", dev, "-i", "2", "-l", "512", "-b"); good {
		if len(out) != 512 {
			r.fail("get-log -i 2 -l 512 -b: %d bytes", len(out))
		} else {
			r.pass("get-log SMART page: 512 bytes, critical warning %#x, temperature %d K", out[0], int(out[1])|int(out[2])<<8)
		}
	}
	// nvmet reads the SMART page whole only (a shorter read fails with
	// Internal Error, for nvme-cli too).
	if out, good := ok("get-log", dev, "-i", "2", "-l", "512"); good &&
		!strings.HasPrefix(out, "Device:"+dev+" log-id:2 namespace-id:0xffffffff\n") {
		r.fail("get-log text header: %q", firstLine(out))
	}
	elpe := -1
	if out, good := ok("id-ctrl", dev, "-o", "json"); good {
		var id map[string]any
		if json.Unmarshal([]byte(out), &id) == nil {
			if v, isNum := id["elpe"].(float64); isNum {
				elpe = int(v)
			}
		}
	}
	if out, good := ok("error-log", dev, "-o", "json"); good {
		var js struct {
			Errors []map[string]any `json:"errors"`
		}
		if err := json.Unmarshal([]byte(out), &js); err != nil || len(js.Errors) != elpe+1 {
			r.fail("error-log -o json: %d entries (%v), want ELPE+1 = %d", len(js.Errors), err, elpe+1)
		} else {
			r.pass("error-log: %d entries (ELPE+1), newest error_count %v", len(js.Errors), js.Errors[0]["error_count"])
		}
	}

	r.step("nvmeof ns-descs")
	if out, good := ok("ns-descs", dev+"n1"); good {
		if !strings.Contains(out, "uuid    : "+c.nsUUID+"\n") {
			r.fail("ns-descs lacks the namespace UUID %s:\n%s", c.nsUUID, indent(out))
		} else {
			r.pass("ns-descs: uuid %s", c.nsUUID)
		}
	}

	r.step("nvmeof get-feature")
	if out, good := ok("get-feature", dev, "-f", "0x0f", "-H"); good {
		// The kernel answers KATO in milliseconds: our default 5 s.
		if !strings.Contains(out, "get-feature:0x0f (Keep Alive Timer), Current value:0x00001388\n") ||
			!strings.Contains(out, "Keep Alive Timeout (KATO) in milliseconds: 5000\n") {
			r.fail("get-feature -f 0x0f -H:\n%s", indent(out))
		} else {
			r.pass("get-feature Keep Alive Timer: 5000 ms")
		}
	}
	if out, good := ok("get-feature", dev, "-f", "7", "-H"); good {
		m := regexp.MustCompile(`Number of IO Submission Queues Allocated \(NSQA\): (\d+)`).FindStringSubmatch(out)
		if m == nil {
			r.fail("get-feature -f 7 -H:\n%s", indent(out))
		} else {
			r.pass("get-feature Number of Queues: NSQA %s", m[1])
		}
	}
	if out, good := ok("get-feature", dev, "-f", "0x0b", "-o", "json"); good && !strings.Contains(out, `"name": "Async Event Configuration"`) {
		r.fail("get-feature -f 0x0b -o json:\n%s", indent(out))
	}

	r.step("nvmeof reset")
	if _, good := ok("reset", dev); good {
		out, _ := ok("list-subsys")
		_, idOK := ok("id-ctrl", dev)
		// The line ends with the state, then the path's ANA state
		// (multipath, docs/multipath.md).
		line := " +- " + dev + " rdma traddr=" + c.traddr + ",trsvcid=" + fmt.Sprint(c.trsvcid) + " live"
		if !(strings.Contains(out, line+"\n") || strings.Contains(out, line+" optimized\n")) || !idOK {
			r.fail("after reset: not live, or id-ctrl fails:\n%s", indent(out))
		} else {
			r.pass("reset: %s live again, id-ctrl answers", dev)
		}
	}
}

// firstLine returns s up to its first newline.
func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
