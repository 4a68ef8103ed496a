package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"", "abc", 3}, {"abc", "", 3}, {"check", "check", 0},
		{"chec", "check", 1}, {"chekc", "check", 2}, {"kitten", "sitting", 3},
		{"flaw", "lawn", 2}, {"a", "b", 1}, {"ab", "ba", 2},
	} {
		if got := Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
		if got := Distance(tt.b, tt.a); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d (symmetric)", tt.b, tt.a, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	keys := []string{"allow_any_host", "attr", "hosts", "namespaces", "nqn", "ports"}
	levels := []string{"trace", "debug", "info", "warn", "error", "off"}
	for _, tt := range []struct {
		name       string
		word       string
		candidates []string
		want       string
	}{
		{"one edit", "alow_any_host", keys, "allow_any_host"},
		{"two edits, long word", "hots", keys, "hosts"},
		{"two edits, short word", "nq", []string{"nqnab"}, ""},
		{"one edit, short word", "nq", keys, "nqn"},
		{"three edits", "portsxyz", keys, ""},
		{"exact", "ports", keys, "ports"},
		{"nearest wins", "debog", levels, "debug"},
		{"first of equals wins", "ab", []string{"ax", "xb"}, "ax"},
		{"nothing close", "serve", levels, ""},
		{"no candidates", "info", nil, ""},
		{"empty word", "", []string{"a", "bc"}, "a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Closest(tt.word, tt.candidates); got != tt.want {
				t.Errorf("Closest(%q, %q) = %q, want %q", tt.word, tt.candidates, got, tt.want)
			}
		})
	}
}

func TestWithin(t *testing.T) {
	levels := []string{"trace", "debug", "info", "warn", "error", "off"}
	for _, tt := range []struct {
		word string
		max  int
		want int
	}{
		{"on", 2, 5}, {"on", 1, -1}, {"inof", 2, 2}, {"warm", 1, 3},
		{"xyzzy", 2, -1}, {"trace", 0, 0}, {"tracer", 0, -1},
	} {
		if got := Within(tt.word, levels, tt.max); got != tt.want {
			t.Errorf("Within(%q, %d) = %d, want %d", tt.word, tt.max, got, tt.want)
		}
	}
}

func TestMaxEdits(t *testing.T) {
	for _, tt := range []struct {
		word string
		want int
	}{{"", 1}, {"abc", 1}, {"abcd", 2}, {"abcdefgh", 2}} {
		if got := MaxEdits(tt.word); got != tt.want {
			t.Errorf("MaxEdits(%q) = %d, want %d", tt.word, got, tt.want)
		}
	}
}
