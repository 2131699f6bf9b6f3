package kit

import (
	"fmt"
	"maps"
	"net"
	"slices"
)

// HostEnv is the variable that tells a worker sharing the host's network which address to
// listen on: LoopbackHost, where Gantry reaches it, and nothing outside the machine does.
const HostEnv = "HOST"

// LoopbackHost is the address HostPorts gives workers to listen on.
const LoopbackHost = "127.0.0.1"

// HostPorts gives each port a worker asks for (spec.PortEnv) a free port of this host, for
// workers that share its network (processes, containers with host networking: two workers
// cannot both listen on 80). env maps each variable to the host port it now names, and HostEnv
// (HOST) to LoopbackHost: a worker listens there only, so that nothing but this machine reaches
// it past Gantry's keys. addrs says where each asked-for port is reached ("127.0.0.1:port").
// Variables asking for the same port get the same host port. The caller puts env over the
// spec's own env, so an endpoint cannot move a worker to every interface.
func HostPorts(portEnv map[string]int) (env map[string]string, addrs map[int]string, err error) {
	if len(portEnv) == 0 {
		return nil, nil, nil
	}
	env, addrs = map[string]string{HostEnv: LoopbackHost}, map[int]string{}
	for _, name := range slices.Sorted(maps.Keys(portEnv)) {
		want := portEnv[name]
		addr, ok := addrs[want]
		if !ok {
			if addr, err = FreePort(); err != nil {
				return nil, nil, fmt.Errorf("finding a free port for %s: %w", name, err)
			}
			addrs[want] = addr
		}
		_, port, _ := net.SplitHostPort(addr)
		env[name] = port
	}
	return env, addrs, nil
}

// FreePort returns a loopback address with a port no one listens on now.
func FreePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}
