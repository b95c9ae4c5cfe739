// Package layering holds no code: its test checks that the kernel side
// (agent, data planes, health probes, the flow model and its wire
// translation) stays a leaf that never depends on the server's packages,
// that the LBaaS domain knows neither HTTP nor the store's engines, and
// that the fan-out acts for no API caller.
package layering
