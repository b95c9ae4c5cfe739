package httpedge

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
)

// failingBody fails its first read with err.
type failingBody struct{ err error }

func (b failingBody) Read([]byte) (int, error) { return 0, b.err }
func (b failingBody) Close() error             { return nil }

func TestReadBodyClassifies(t *testing.T) {
	for _, tc := range []struct {
		name string
		body io.ReadCloser
		want int
	}{
		{"too large", http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader("0123456789")), 4), http.StatusRequestEntityTooLarge},
		{"truncated", failingBody{io.ErrUnexpectedEOF}, http.StatusBadRequest},
		{"bad chunking", failingBody{errors.New("malformed chunked encoding")}, http.StatusBadRequest},
		{"deadline", failingBody{fmt.Errorf("read: %w", os.ErrDeadlineExceeded)}, http.StatusRequestTimeout},
	} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Body = tc.body
		_, err := ReadBody(r)
		var e *Error
		if !errors.As(err, &e) || e.Status != tc.want || e.Message == "" {
			t.Errorf("%s: %v, want status %d", tc.name, err, tc.want)
		}
	}
	r := httptest.NewRequest("POST", "/", strings.NewReader(`{"a":1}`))
	if b, err := ReadBody(r); err != nil || string(b) != `{"a":1}` {
		t.Errorf("whole body: %q %v", b, err)
	}
}

func TestCheckJSON(t *testing.T) {
	for ct, ok := range map[string]bool{
		"":                                  true,
		"application/json":                  true,
		"application/json; charset=UTF-8":   true,
		"Application/JSON":                  true,
		"text/javascript":                   true,
		"text/plain":                        false,
		"application/x-www-form-urlencoded": false,
		"application/xml":                   false,
	} {
		r := httptest.NewRequest("POST", "/", nil)
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		err := CheckJSON(r)
		var e *Error
		if ok != (err == nil) || (!ok && (!errors.As(err, &e) || e.Status != 415 || !strings.HasPrefix(e.Message, "Unknown mimetype: "))) {
			t.Errorf("%q: %v, want ok=%v", ct, err, ok)
		}
	}
}

func TestCheckText(t *testing.T) {
	if CheckUTF8([]byte(`{"name":"é"}`)) != nil || CheckUTF8([]byte("{\"name\":\"\xff\"}")) == nil {
		t.Error("CheckUTF8 does not tell valid from invalid UTF-8")
	}
	for target, ok := range map[string]bool{
		"/loadbalancers/x?name=a":   true,
		"/loadbalancers/%00":        false,
		"/loadbalancers?name=a%00b": false,
		"/loadbalancers?a%00=b":     false,
		"/loadbalancers?name=%ff":   false,
	} {
		if got := CheckURL(httptest.NewRequest("GET", target, nil)); (got == nil) != ok {
			t.Errorf("CheckURL(%s) = %v, want ok=%v", target, got, ok)
		}
	}
	for _, tc := range []struct {
		v          any
		attr, val  string
		wantsFound bool
	}{
		{map[string]any{"name": "ok", "tags": []any{"a", "b"}}, "", "", false},
		{map[string]any{"name": "a\x00b"}, "name", "a\x00b", true},
		{map[string]any{"x": map[string]any{"tags": []any{"t", "\x00"}}}, "tags", "\x00", true},
		{map[string]any{"k\x00": 1}, "k\x00", "k\x00", true},
		{[]any{"\x00"}, "", "\x00", true},
	} {
		attr, val, found := FindNUL(tc.v)
		if found != tc.wantsFound || attr != tc.attr || val != tc.val {
			t.Errorf("FindNUL(%q) = %q %q %v", tc.v, attr, val, found)
		}
	}
}

func TestAllowed(t *testing.T) {
	mux := http.NewServeMux()
	noop := func(http.ResponseWriter, *http.Request) {}
	mux.HandleFunc("GET /things", noop)
	mux.HandleFunc("POST /things", noop)
	mux.HandleFunc("DELETE /things/{id}", noop)
	mux.HandleFunc("/", noop)
	for path, want := range map[string][]string{
		"/things":   {"GET", "POST"},
		"/things/x": {"DELETE"},
		"/nothing":  nil,
	} {
		if got := Allowed(mux, httptest.NewRequest("PATCH", path, nil), "/"); !slices.Equal(got, want) {
			t.Errorf("Allowed(%s) = %v, want %v", path, got, want)
		}
	}
}
