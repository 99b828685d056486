package jetruntype

import "errors"

// ErrRunNotFound is the error, wrapped, of every call about a run id with
// no row (never dispatched, or cleared); test for it with errors.Is.
// Package parent re-exports it as parent.ErrRunNotFound.
var ErrRunNotFound = errors.New("run not found")
