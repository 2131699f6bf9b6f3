//go:build !unix

package lbproxy

import "net"

// peerOpen cannot peek here: an idle connection is taken as open, and a request on one the
// worker closed fails with a 502 (it is not retried).
func peerOpen(net.Conn) bool { return true }
