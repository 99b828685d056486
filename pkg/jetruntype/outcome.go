package jetruntype

import "time"

// Cancel marks err, returned by any jetrun handler (a worker's run handler,
// a step, a finish or milestone handler, a call handler), as a failure no
// retry can fix: the handler is not called again for it. nil stays nil.
func Cancel(err error) error {
	if err == nil {
		return nil
	}
	return &CancelError{Err: err}
}

// CancelError is the error Cancel returns; tests can find it with
// errors.As.
type CancelError struct {
	Err error
}

// Error is the wrapped error's text.
func (e *CancelError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *CancelError) Unwrap() error { return e.Err }

// RetryAfter marks err, returned by any jetrun handler, as worth another
// try after d (0: the handler's own back-off). Tries are bounded by the
// role's MaxAttempts. nil stays nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &RetryError{Err: err, Delay: d}
}

// RetryError is the error RetryAfter returns; tests can find it with
// errors.As.
type RetryError struct {
	Err   error
	Delay time.Duration // 0: the handler's own back-off
}

// Error is the wrapped error's text.
func (e *RetryError) Error() string { return e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *RetryError) Unwrap() error { return e.Err }
