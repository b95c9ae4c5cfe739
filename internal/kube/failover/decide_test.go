package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"
)

func TestRetry(t *testing.T) {
	outcomes := []Outcome{Answered, Unavailable, NotSent, Lost}
	// want[method] lists Retry for each outcome, in the order above.
	want := map[string][4]bool{
		http.MethodPost:   {false, true, true, false},
		http.MethodPatch:  {false, true, true, false},
		http.MethodGet:    {false, true, true, true},
		http.MethodHead:   {false, true, true, true},
		http.MethodPut:    {false, true, true, true},
		http.MethodDelete: {false, true, true, true},
	}
	for method, row := range want {
		for i, outcome := range outcomes {
			if got := Retry(method, outcome); got != row[i] {
				t.Errorf("Retry(%s, %s) = %v, want %v", method, outcome, got, row[i])
			}
		}
	}
}

func TestClassify(t *testing.T) {
	dial := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	read := func(err error) error { return &net.OpError{Op: "read", Net: "tcp", Err: err} }
	cases := []struct {
		name   string
		status int
		err    error
		want   Outcome
	}{
		{"200", 200, nil, Answered},
		{"201", 201, nil, Answered},
		{"404", 404, nil, Answered},
		{"409 (immutable)", 409, nil, Answered},
		{"500", 500, nil, Answered},
		{"502", 502, nil, Answered},
		{"503", 503, nil, Unavailable},
		{"connection refused", 0, dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), NotSent},
		{"dial timeout", 0, dial(timeoutError{}), NotSent},
		{"name not resolved", 0, dial(&net.DNSError{Err: "no such host", Name: "api", IsNotFound: true}), NotSent},
		{"dial error wrapped", 0, fmt.Errorf("send: %w", &url.Error{Op: "Post", URL: "http://api", Err: dial(syscall.ECONNREFUSED)}), NotSent},
		{"reset after sending", 0, read(os.NewSyscallError("read", syscall.ECONNRESET)), Lost},
		{"write broken", 0, &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, Lost},
		{"closed before the answer", 0, io.EOF, Lost},
		{"answer cut", 0, io.ErrUnexpectedEOF, Lost},
		{"read timeout", 0, read(timeoutError{}), Lost},
		{"deadline", 0, context.DeadlineExceeded, Lost},
		{"other", 0, errors.New("tls: handshake failure"), Lost},
	}
	for _, c := range cases {
		var resp *http.Response
		if c.err == nil {
			resp = &http.Response{StatusCode: c.status}
		}
		if got := Classify(resp, c.err); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
