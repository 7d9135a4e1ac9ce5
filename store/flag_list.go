package store

import (
	"errors"
	"fmt"
	"strings"
)

// An operator's listing of flags (Store.ListFlags): newest first, open
// ones or all, every hop's or a few hops', a page at a time; and how many
// are open (Store.CountOpenFlags), counted without reading them all. The
// SQL stores answer each from an index (flags by id, open flags by id,
// flags by hop), so a page costs about the same with ten flags or a
// hundred thousand.

// FlagQuery selects the flags of a listing. The zero values select every
// flag, open or resolved, of every hop.
type FlagQuery struct {
	Open bool // only open flags (not resolved)
	// Hops: only these hops' flags (none: every hop's), at most
	// MaxFlagHops of them.
	Hops []HopKey
	// Before: only flags whose ID is below it, where the last page ended
	// (that page's last flag's ID); 0 starts with the newest flag.
	Before int64
	Limit  int // at most this many flags, 1 to MaxListLimit
}

// MaxFlagHops bounds FlagQuery.Hops: the hops of one page of a listing.
const MaxFlagHops = 200

// Check reports what is wrong with q, if anything.
func (q FlagQuery) Check() error {
	var bad []string
	if q.Limit < 1 || q.Limit > MaxListLimit {
		bad = append(bad, fmt.Sprintf("limit must be 1 to %d, not %d", MaxListLimit, q.Limit))
	}
	if len(q.Hops) > MaxFlagHops {
		bad = append(bad, fmt.Sprintf("at most %d hops, not %d", MaxFlagHops, len(q.Hops)))
	}
	if q.Before < 0 {
		bad = append(bad, fmt.Sprintf("before must be a flag's id or 0, not %d", q.Before))
	}
	if len(bad) > 0 {
		return fmt.Errorf("store: flags: %w", errors.New(strings.Join(bad, "; ")))
	}
	return nil
}

// Matches reports whether q selects f, leaving aside Before and Limit.
func (q FlagQuery) Matches(f Flag) bool {
	if q.Open && !f.Resolved.IsZero() {
		return false
	}
	if len(q.Hops) == 0 {
		return true
	}
	for _, k := range q.Hops {
		if k.Iss == f.Iss && k.Hop == f.Hop {
			return true
		}
	}
	return false
}
