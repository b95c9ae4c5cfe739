package store

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// unavailable marks err as ErrUnavailable when it says the database
// cannot be reached, and returns any other error as it is.
func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) || !unreachable(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// unreachable reports whether err is about the connection rather than the
// statement: refused or lost connections, a server shutting down or not
// yet accepting connections.
func unreachable(err error) bool {
	var ne *net.OpError
	var ce *pgconn.ConnectError
	switch {
	case errors.Is(err, driver.ErrBadConn), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.As(err, &ne), errors.As(err, &ce):
		return true
	}
	// Class 08: connection exception; 57P01-03: admin shutdown, crash
	// shutdown, cannot connect now.
	if c := pgCode(err); strings.HasPrefix(c, "08") || c == "57P01" || c == "57P02" || c == "57P03" {
		return true
	}
	return strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "unexpected EOF")
}
