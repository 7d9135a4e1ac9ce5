package a2ahandoff

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error of a call made wrongly: a nil
// argument or receiver, a value not made by this package's constructor,
// an option out of range, an element of the wrong kind (a status where
// an offer belongs). It is a bug in the caller, never the peer's fault or
// the network's: match it with errors.Is, not by the message.
var ErrInvalid = errors.New("a2ahandoff: invalid use")

// invalid and invalidf make an error of a call made wrongly: its message
// is msg (or the format's, whose %w it still wraps), and it is ErrInvalid
// to errors.Is.
func invalid(msg string) error { return kindError{errors.New(msg), ErrInvalid} }

func invalidf(format string, a ...any) error { return kindError{fmt.Errorf(format, a...), ErrInvalid} }

// kindError is an error of a kind (a sentinel) whose own message says
// more than the sentinel's.
type kindError struct {
	error
	kind error
}

func (e kindError) Unwrap() error { return e.error }

func (e kindError) Is(target error) bool { return target == e.kind }
