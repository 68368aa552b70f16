package transport

import (
	"errors"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// cmaRead copies segs of process pid's memory into dst (whose length is
// their total), resuming after partial reads.
func cmaRead(pid int, dst []byte, segs []cmaSeg) error {
	remote := make([]unix.RemoteIovec, 0, len(segs))
	for _, s := range segs {
		if s.n > 0 {
			remote = append(remote, unix.RemoteIovec{Base: uintptr(s.addr), Len: int(s.n)})
		}
	}
	for len(dst) > 0 {
		local := []unix.Iovec{{Base: &dst[0]}}
		local[0].SetLen(len(dst))
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading the message from process %d: %w", pid, err)
		}
		if n <= 0 {
			return fmt.Errorf("reading the message from process %d: no progress", pid)
		}
		dst = dst[n:]
		for n > 0 {
			if n < remote[0].Len {
				remote[0].Base += uintptr(n)
				remote[0].Len -= n
				break
			}
			n -= remote[0].Len
			remote = remote[1:]
		}
	}
	return nil
}

// hungUp says whether the peer has closed its end of c (POLLRDHUP): true
// also when that cannot be told, to stay on the safe side.
func hungUp(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	gone := true
	rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		n, err := unix.Poll(fds, 0)
		for err == unix.EINTR { // a signal (the runtime's preemption) is no hang-up
			n, err = unix.Poll(fds, 0)
		}
		gone = err != nil || (n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0)
	})
	return gone
}
