package consensus

import (
	"strings"
	"testing"
)

// utf16Within must agree with the full count it short-cuts, across ASCII,
// 2- and 3-byte runes, surrogate pairs, invalid bytes and every bound
// around the string's length.
func TestUTF16Within_MatchesFullCount(t *testing.T) {
	for _, s := range []string{"", "a", "abc", "é", "ééé", "日本語", "🎉", "a🎉b🎉", "\xff\xfe", "x\xffé🎉",
		strings.Repeat("🎉", 50), strings.Repeat("aé日🎉", 40)} {
		for max := 0; max <= len(s)+2; max++ {
			if got, want := utf16Within(s, max), utf16Len(s) <= max; got != want {
				t.Fatalf("utf16Within(%q, %d) = %v, want %v", s, max, got, want)
			}
		}
	}
}
