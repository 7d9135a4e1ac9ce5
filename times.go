package handoff

import (
	"fmt"
	"time"
)

// Times in errors are for people as well as programs: the Unix seconds as
// they are on the wire, then the UTC time they stand for, and a difference
// as a duration ("expired 11m40s ago"), not only two numbers to subtract.

// unixAt names a Unix time: its seconds, then RFC 3339 in UTC.
func unixAt(s int64) string {
	return fmt.Sprintf("%d (%s)", s, time.Unix(s, 0).UTC().Format(time.RFC3339))
}

// span says a number of seconds as a duration, or as seconds when it is
// longer than a century (a time.Duration holds about 292 years).
func span(s int64) string {
	if s < 0 {
		s = -s
	}
	if s > 100*366*24*3600 {
		return fmt.Sprintf("%d s", s)
	}
	return (time.Duration(s) * time.Second).String()
}
