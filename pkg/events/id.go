package events

import (
	"errors"
	"fmt"
)

// MaxIDLength is the longest run id, agent type or handler name accepted.
const MaxIDLength = 64

// ErrInvalidID is returned (wrapped, with the reason) by [ValidateID] and
// [ValidateToken], and by every API that takes an id.
var ErrInvalidID = errors.New("invalid id")

// ValidateID reports whether id can be used as a run id: 1 to 64 characters
// from [A-Za-z0-9_-]. Such an id is a single subject token and a KV key.
func ValidateID(id string) error { return validateToken("run id", id) }

// ValidateToken reports whether s can be used as the name what says (an
// "agent type", a "signal name", "handler name", "call name", "milestone
// name"): like a run
// id, 1 to 64 characters from [A-Za-z0-9_-], a single subject token. The
// error names what.
func ValidateToken(what, s string) error { return validateToken(what, s) }

func validateToken(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s is empty", ErrInvalidID, what)
	}
	if len(s) > MaxIDLength {
		return fmt.Errorf("%w: %s is %d characters long; the limit is %d", ErrInvalidID, what, len(s), MaxIDLength)
	}
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			return fmt.Errorf("%w: %s %.80q has %q at position %d; only letters, digits, '-' and '_' are allowed",
				ErrInvalidID, what, s, s[i], i)
		}
	}
	return nil
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// mustToken panics when s is not a valid token. Subject builders use it so a
// missed validation is a loud programming error, never an injected wildcard.
func mustToken(what, s string) string {
	if err := validateToken(what, s); err != nil {
		panic("events: " + err.Error())
	}
	return s
}
