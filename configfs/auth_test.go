package configfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	authHost = "nqn.2014-08.org.nvmexpress:uuid:0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	// Bytes 0..31 with transform sha256 and its CRC (nvme/auth's test key).
	authKey  = "DHHC-1:01:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	authKey2 = "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
	// The same bytes with the first one changed: CRC mismatch.
	badCRCKey = "DHHC-1:01:AQECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:"
)

func authHCL(hostBody string) string {
	return `host "` + authHost + `" {
` + hostBody + `
}

subsystem "nqn.2026-11.io.nvmeof:s1" {
  allowed_hosts = ["` + authHost + `"]
}
`
}

func TestHostDHCHAP(t *testing.T) {
	tree, err := ParseHCL([]byte(authHCL(`  dhchap_key = "`+authKey+`"
  dhchap_ctrl_key = "`+authKey2+`"
  dhchap_hash = "hmac(sha384)"
  dhchap_dhgroup = "ffdhe3072"`)), "a.hcl")
	if err != nil {
		t.Fatal(err)
	}
	h := tree.Host(authHost)
	if h.DHCHAPKey != authKey || h.DHCHAPCtrlKey != authKey2 || h.DHCHAPHash != "hmac(sha384)" || h.DHCHAPDHGroup != "ffdhe3072" || !h.HasDHCHAP() {
		t.Fatalf("host %+v", h)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", h, h, h, h.DHCHAPKey); strings.Contains(s, "AAECAwQF") {
		t.Errorf("printing a host shows its key: %s", s)
	}
	out := string(tree.HCL())
	for _, want := range []string{`dhchap_key      = "` + authKey + `"`, `dhchap_ctrl_key = "` + authKey2 + `"`, `"hmac(sha384)"`, `"ffdhe3072"`} {
		if !strings.Contains(out, want) {
			t.Errorf("HCL lacks %s:\n%s", want, out)
		}
	}
	again, err := ParseHCL([]byte(out), "b.hcl")
	if err != nil {
		t.Fatalf("HCL output does not parse: %v\n%s", err, out)
	}
	if ch := Diff(tree, again); !ch.Empty() {
		t.Errorf("round trip changed %+v", ch)
	}

	// nvmetcli JSON: hosts[].attr with the kernel's file names.
	js, err := tree.NvmetcliJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"dhchap_dhgroup": "ffdhe3072"`) || !strings.Contains(string(js), `"dhchap_key": "`+authKey+`"`) {
		t.Errorf("JSON:\n%s", js)
	}
	back, err := ParseNvmetcliJSON(js, "c.json")
	if err != nil {
		t.Fatal(err)
	}
	if bh := back.Host(authHost); bh == nil || !bh.authEqual(h) {
		t.Errorf("JSON round trip: %+v", bh)
	}

	// Defaults and Diff.
	plain, err := ParseHCL([]byte(authHCL(`  dhchap_key = "`+authKey+`"`)), "d.hcl")
	if err != nil {
		t.Fatal(err)
	}
	ph := plain.Host(authHost)
	if ph.EffectiveDHCHAPHash() != "hmac(sha256)" || ph.EffectiveDHCHAPDHGroup() != "null" {
		t.Errorf("defaults %q %q", ph.EffectiveDHCHAPHash(), ph.EffectiveDHCHAPDHGroup())
	}
	if ch := Diff(plain, tree); len(ch.HostsChanged) != 1 || ch.HostsChanged[0] != authHost {
		t.Errorf("Diff HostsChanged %v", ch.HostsChanged)
	}
}

// checkRefused checks that err is a load's refusal containing each of
// want and none of the test keys' secret bytes.
func checkRefused(t *testing.T, err error, want []string) {
	t.Helper()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	if strings.Contains(err.Error(), "AAECAwQF") || strings.Contains(err.Error(), "AQECAwQF") {
		t.Errorf("error shows the key: %v", err)
	}
}

func TestHostDHCHAPErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"crc", `  dhchap_key = "` + badCRCKey + `"`, []string{"a.hcl:2:16: hosts/" + authHost + ": dhchap_key: DHHC-1 secret CRC mismatch"}},
		{"format", `  dhchap_key = "DHHC-1:07:abc:"`, []string{"a.hcl:2:16:", "dhchap_key:", "not a DHHC-1 secret"}},
		{"hash", `  dhchap_key = "` + authKey + `"
  dhchap_hash = "hmac(md5)"`, []string{"a.hcl:3:17:", "dhchap_hash:", "unknown DH-HMAC-CHAP hash"}},
		{"dhgroup", `  dhchap_key = "` + authKey + `"
  dhchap_dhgroup = "ffdhe1024"`, []string{"a.hcl:3:20:", "dhchap_dhgroup:", "unknown DH-HMAC-CHAP DH group"}},
		{"ctrl key alone", `  dhchap_ctrl_key = "` + authKey + `"`, []string{"a.hcl:2:", "dhchap_ctrl_key:", "needs dhchap_key"}},
		{"unknown attribute", `  dhchap_secret = "x"`, []string{"a.hcl:2:", `"dhchap_secret"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseHCL([]byte(authHCL(tc.body)), "a.hcl")
			checkRefused(t, err, tc.want)
		})
	}
}

func TestHostDHCHAPKeyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	write("host.key", authKey+"\n", 0o600)
	write("ctrl.key", authKey2, 0o400)
	write("open.key", authKey, 0o644)
	write("bad.key", badCRCKey, 0o600)
	cfg := filepath.Join(dir, "nvmetd.hcl")
	load := func(body string) (*Tree, error) {
		if err := os.WriteFile(cfg, []byte(authHCL(body)), 0o644); err != nil {
			t.Fatal(err)
		}
		return LoadFile(cfg)
	}
	tree, err := load(`  dhchap_key_file = "host.key"
  dhchap_ctrl_key_file = "` + filepath.Join(dir, "ctrl.key") + `"`)
	if err != nil {
		t.Fatal(err)
	}
	h := tree.Host(authHost)
	if h.DHCHAPKey != authKey || h.DHCHAPCtrlKey != authKey2 {
		t.Fatalf("keys not read from the files")
	}
	if out := string(tree.HCL()); strings.Contains(out, "AAECAwQF") || !strings.Contains(out, `dhchap_key_file      = "host.key"`) {
		t.Errorf("HCL of file keys:\n%s", out)
	}

	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"group readable", `  dhchap_key_file = "open.key"`, []string{cfg + ":2:21:", "dhchap_key_file:", "accessible by group or others (mode 0644): chmod 600"}},
		{"missing", `  dhchap_key_file = "nope.key"`, []string{cfg + ":2:21:", "no such file"}},
		{"bad crc", `  dhchap_key_file = "bad.key"`, []string{cfg + ":2:21:", "dhchap_key_file:", "CRC mismatch"}},
		{"both", `  dhchap_key = "` + authKey + `"
  dhchap_key_file = "host.key"`, []string{cfg + ":3:", "both set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(tc.body)
			checkRefused(t, err, tc.want)
		})
	}
}
