// Package layering holds no code: its test checks the rules that the
// directories under internal/ stand for. A package's side of the wire is
// its path (shared leaves, server, node, kube, lab), and no side reaches
// into another but the shared leaves; within the server, the LBaaS
// domain knows neither HTTP nor the store's engines, and the fan-out
// acts for no API caller.
package layering
