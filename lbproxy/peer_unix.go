//go:build unix

package lbproxy

import (
	"net"
	"syscall"
)

// peerOpen says whether an idle connection is still open at the worker's end: a peek that
// finds nothing to read (EAGAIN) says so; an end of stream, a reset or stray bytes say not.
func peerOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		_, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = rerr == syscall.EAGAIN || rerr == syscall.EWOULDBLOCK
		return true // never wait for readiness: this is a check, not a read
	})
	return err == nil && open
}
