package comm

import (
	"errors"
	"fmt"
)

// Code classifies an op's failure; the values are the C ABI's ZC_ERR_*.
type Code int32

// The failure classes.
const (
	CodeOK       Code = 0
	CodeInvalid  Code = 1
	CodeComm     Code = 2
	CodeTimeout  Code = 3
	CodeMismatch Code = 4
	CodeInternal Code = 5
)

// Error is what every failed op reports: a class and a message that names
// the op, the ranks involved and the cause.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func invalidf(format string, args ...any) error {
	return &Error{Code: CodeInvalid, Msg: "zipccl: " + fmt.Sprintf(format, args...)}
}

// CodeOf returns the class of err (CodeInternal for foreign errors).
func CodeOf(err error) Code {
	if err == nil {
		return CodeOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var m *mismatchError
	if errors.As(err, &m) {
		return CodeMismatch
	}
	var t *timeoutError
	if errors.As(err, &t) {
		return CodeTimeout
	}
	var b *brokenError
	if errors.As(err, &b) {
		return CodeComm
	}
	return CodeInternal
}

// timeoutError is the cause of an op context that ran out of time. Worded
// as torch's tests and log scrapers look for it (" Timed out ").
type timeoutError struct{ after string }

func (e *timeoutError) Error() string { return "Timed out after " + e.after }

// brokenError is the cause of every op failure once the group is unusable.
type brokenError struct{ reason string }

func (e *brokenError) Error() string { return e.reason }

// mismatchError says the ranks disagreed about an op.
type mismatchError struct{ msg string }

func (e *mismatchError) Error() string { return e.msg }
