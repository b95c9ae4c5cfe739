package octavia

import (
	"errors"
	"net/http"

	"github.com/flowlb/flowlb/internal/octavia/fault"
)

func asFault(err error, fe **fault.Error) bool { return errors.As(err, fe) }

func asMaxBytes(err error, e **http.MaxBytesError) bool { return errors.As(err, e) }
