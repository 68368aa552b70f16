package rendezvous

import (
	"fmt"
	"net"
	"os"
	"strings"
)

// LocalIP chooses the address this process listens on, the way Gloo does
// with GLOO_SOCKET_IFNAME:
//   - ZIPCCL_SOCKET_IFNAME: a comma-separated list of interface names; the
//     first one that exists and has an address is used;
//   - else the interface that routes to MASTER_ADDR;
//   - else the address the host name resolves to;
//   - else loopback.
//
// The second result says how the address was chosen, for the INFO log.
func LocalIP() (net.IP, string, error) {
	if names := os.Getenv("ZIPCCL_SOCKET_IFNAME"); names != "" {
		for _, name := range strings.Split(names, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if ip, err := interfaceIP(name); err == nil {
				return ip, "ZIPCCL_SOCKET_IFNAME=" + name, nil
			}
		}
		return nil, "", fmt.Errorf("zipccl: ZIPCCL_SOCKET_IFNAME=%q: no listed interface exists with an IP address", names)
	}
	if master := os.Getenv("MASTER_ADDR"); master != "" {
		if ip, err := routeTo(master); err == nil {
			return ip, "route to MASTER_ADDR=" + master, nil
		}
	}
	if host, err := os.Hostname(); err == nil {
		if ips, err := net.LookupIP(host); err == nil {
			for _, ip := range ips {
				if ip.To4() != nil && canBind(ip) {
					return ip, "host name " + host, nil
				}
			}
		}
	}
	return net.IPv4(127, 0, 0, 1), "loopback (no interface configured)", nil
}

func interfaceIP(name string) (net.IP, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	var v6 net.IP
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ipn.IP.To4() != nil {
			return ipn.IP, nil
		}
		if v6 == nil && !ipn.IP.IsLinkLocalUnicast() {
			v6 = ipn.IP
		}
	}
	if v6 != nil {
		return v6, nil
	}
	return nil, fmt.Errorf("interface %s has no usable address", name)
}

// routeTo returns the local address the kernel would use to reach host. A
// UDP "connect" sends no packet; it only consults the routing table.
func routeTo(host string) (net.IP, error) {
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return nil, fmt.Errorf("cannot resolve %q: %v", host, err)
	}
	target := ips[0]
	for _, ip := range ips {
		if ip.To4() != nil {
			target = ip
			break
		}
	}
	if target.IsLoopback() {
		return target, nil
	}
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: target, Port: 9})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP, nil
}

func canBind(ip net.IP) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
