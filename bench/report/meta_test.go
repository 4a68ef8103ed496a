package report

import "testing"

func TestMetaFlag(t *testing.T) {
	m := MetaFlag{}
	for _, tc := range []struct {
		in string
		ok bool
	}{{"date=2026-12-05", true}, {"red=limit 400000 min=30000", true}, {"nokey", false}, {"=empty key", true}} {
		if err := m.Set(tc.in); (err == nil) != tc.ok {
			t.Errorf("Set(%q) = %v", tc.in, err)
		}
	}
	if m["date"] != "2026-12-05" || m["red"] != "limit 400000 min=30000" || m[""] != "empty key" || len(m) != 3 {
		t.Errorf("%v", m)
	}
}
