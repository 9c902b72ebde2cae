// Package suggest finds the name a mistyped one probably meant: the "did
// you mean" of config errors, CLI errors and the daemon's logs.
package suggest

import "strings"

// Closest returns the candidate nearest to name (case-insensitive edit
// distance at most 2, and less than half of name's length), or "". A tie
// goes to the first candidate: callers list them in the order they prefer
// (sorted, for names from a map).
func Closest(name string, candidates []string) string {
	best, bestDist := "", 3
	n := strings.ToLower(name)
	for _, c := range candidates {
		d := editDistance(n, strings.ToLower(c))
		if d < bestDist && d*2 < len(n) {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the edit distance between a and b, in bytes, counting
// the swap of two adjacent bytes as one edit (optimal string alignment):
// "slwo" is one edit from "slow", as a typist made it.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
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
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
