// Package suggest finds the word a user probably meant ("did you mean
// --check?") among the words a command line or a configuration accepts,
// by Levenshtein distance.
package suggest

// Closest returns the first of candidates nearest to word when it is close
// enough to be a typo (MaxEdits), else "".
func Closest(word string, candidates []string) string {
	if i := Within(word, candidates, MaxEdits(word)); i >= 0 {
		return candidates[i]
	}
	return ""
}

// MaxEdits is how many edits a typo of word may take: one, two from four
// bytes on (two edits in a shorter word make most of it another word).
func MaxEdits(word string) int {
	if len(word) >= 4 {
		return 2
	}
	return 1
}

// Within returns the index of the first of candidates nearest to word
// within maxEdits edits, or -1 when none is.
func Within(word string, candidates []string, maxEdits int) int {
	best, bestD := -1, maxEdits+1
	for i, c := range candidates {
		if d := Distance(word, c); d < bestD {
			best, bestD = i, d
		}
	}
	return best
}

// Distance is the Levenshtein distance of a and b in bytes: the fewest
// single-byte insertions, deletions and substitutions that turn a into b.
func Distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
