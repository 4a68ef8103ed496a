package hostcli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nvmeof/nvmeof/fabrics"
	"github.com/nvmeof/nvmeof/initiator"
)

// runCLI runs the CLI in-process and returns its exit status and output.
func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = Run(append([]string{"nvmeof"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func TestGenHostNQN(t *testing.T) {
	seen := map[string]bool{}
	for range 4 {
		code, out, errs := runCLI("gen-hostnqn")
		if code != 0 || errs != "" {
			t.Fatalf("gen-hostnqn: exit %d, stderr %q", code, errs)
		}
		nqn := strings.TrimSuffix(out, "\n")
		if strings.Contains(nqn, "\n") {
			t.Fatalf("gen-hostnqn printed more than one line: %q", out)
		}
		u, ok := fabrics.UUIDFromNQN(nqn)
		if !ok || fabrics.ValidateNQN(nqn) != nil {
			t.Fatalf("gen-hostnqn printed %q: not a UUID NQN", nqn)
		}
		if u[6]>>4 != 4 || u[8]>>6 != 2 {
			t.Errorf("%q: not a version 4 variant 1 UUID", nqn)
		}
		if seen[nqn] {
			t.Errorf("gen-hostnqn repeated %q", nqn)
		}
		seen[nqn] = true
	}
	if code, _, errs := runCLI("gen-hostnqn", "extra"); code != 1 || !strings.Contains(errs, "no arguments") {
		t.Errorf("gen-hostnqn extra: exit %d, stderr %q", code, errs)
	}
}

func TestShowHostNQN(t *testing.T) {
	tempHostNQNFiles(t)

	// Nothing to derive it from: nvme-cli's advice, exit 1.
	if code, out, errs := runCLI("show-hostnqn"); code != 1 || out != "" ||
		errs != "nvmeof: hostnqn is not available -- use nvmeof gen-hostnqn\n" {
		t.Errorf("no source: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// machine-id, then the DMI UUID, then the file win, as connect uses them.
	steps := []struct {
		file, content, want string
	}{
		{machineIDFile, "0123456789abcdef0123456789abcdef\n", "nqn.2014-08.org.nvmexpress:uuid:01234567-89ab-4def-8123-456789abcdef"},
		{dmiUUIDFile, "4C4C4544-0042-3510-8052-B4C04F4E3132\n", "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0042-3510-8052-b4c04f4e3132"},
		{initiator.HostNQNFile, "nqn.2014-08.org.nvmexpress:uuid:5a3c1b2e-0b7a-4c1e-9d8f-0123456789ab\n", "nqn.2014-08.org.nvmexpress:uuid:5a3c1b2e-0b7a-4c1e-9d8f-0123456789ab"},
	}
	for _, s := range steps {
		if err := os.WriteFile(s.file, []byte(s.content), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := runCLI("show-hostnqn")
		if code != 0 || out != s.want+"\n" || errs != "" {
			t.Errorf("after %s: exit %d, stdout %q (want %q), stderr %q", filepath.Base(s.file), code, out, s.want, errs)
		}
		if got := defaultHostNQN(); got != s.want {
			t.Errorf("defaultHostNQN %q, show-hostnqn %q: connect would use another NQN", got, s.want)
		}
	}
}
