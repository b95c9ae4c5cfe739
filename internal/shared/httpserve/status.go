package httpserve

import "net/http"

// StatusRecorder is a ResponseWriter that remembers the status of the
// answer it carries (200 when the handler wrote without a header).
type StatusRecorder struct {
	http.ResponseWriter
	Status int
}

func (r *StatusRecorder) WriteHeader(code int) {
	if r.Status == 0 {
		r.Status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *StatusRecorder) Write(b []byte) (int, error) {
	if r.Status == 0 {
		r.Status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (r *StatusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
