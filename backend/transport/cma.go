package transport

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/zipccl/zipccl/backend/hosts"
)

// Between two processes of one host and one network namespace, a large
// message need not cross the loopback socket (a copy into the kernel and
// another out of it, on two CPUs): the receiver copies it straight out of
// the sender's memory with process_vm_readv, one copy, and the socket
// carries only the frame header, the addresses and an acknowledgement.
// This is what MPI's CMA and NCCL's intra-node transports do. Ranks in
// different network namespaces (the benchmark harness's shaped links) never
// take it, so a link stays a link.
//
// A pair finds out whether it may with a probe after the handshake: each
// side sends its process id, its network namespace and the address of a
// random token in its memory (cmaHello); the other side reads the token
// from that process and answers whether it found it (cmaReply). Only a
// sender whose peer answered yes sends descriptors (flagCMA); everything
// else travels on the socket as before.
const (
	// cmaMin is the smallest message sent by descriptor: below it the
	// acknowledgement's round trip costs more than the copy it saves.
	cmaMin = 256 << 10
	// cmaMaxSegs bounds the buffers one descriptor lists (Send's bufs).
	cmaMaxSegs = 8
	// cmaHelloLen: pid u32, pad u32, netns dev u64, netns inode u64,
	// token address u64, token [16]byte.
	cmaHelloLen = 48
)

// For tests: messages read by descriptor, a hook run before each read, and
// one that replaces its error.
var (
	cmaReads      atomic.Int64
	cmaBeforeRead atomic.Pointer[func()]
	cmaReadErr    atomic.Pointer[func() error] // replaces the read's error
)

// cmaIdentity is this process's side of the probe.
type cmaIdentity struct {
	pid          uint32
	nsDev, nsIno uint64
	token        *[16]byte // read by peers; never freed
}

var localCMA = sync.OnceValues(func() (*cmaIdentity, error) {
	dev, ino, err := hosts.NetNS()
	if err != nil {
		return nil, err
	}
	id := &cmaIdentity{pid: uint32(os.Getpid()), nsDev: dev, nsIno: ino, token: new([16]byte)}
	if _, err := rand.Read(id.token[:]); err != nil {
		return nil, err
	}
	return id, nil
})

// cmaEnabled says whether this mesh offers its memory to peers and reads
// theirs: not when ZIPCCL_CMA=0, nor where the system cannot.
func cmaEnabled() bool {
	switch strings.TrimSpace(os.Getenv("ZIPCCL_CMA")) {
	case "0", "off", "never", "false":
		return false
	}
	id, err := localCMA()
	return err == nil && id != nil
}

func (id *cmaIdentity) hello() []byte {
	b := make([]byte, cmaHelloLen)
	binary.LittleEndian.PutUint32(b[0:], id.pid)
	binary.LittleEndian.PutUint64(b[8:], id.nsDev)
	binary.LittleEndian.PutUint64(b[16:], id.nsIno)
	binary.LittleEndian.PutUint64(b[24:], uint64(uintptr(unsafe.Pointer(id.token))))
	copy(b[32:], id.token[:])
	return b
}

// probeCMA reads a peer's hello and returns the pid to read its messages
// from, or 0 when this side cannot: another namespace or host (denied
// nil), or a peer in this namespace whose memory cannot be read (denied
// says why: ptrace_scope, seccomp, another pid namespace).
func probeCMA(b []byte) (pid int, denied error) {
	me, err := localCMA()
	if err != nil || me == nil || len(b) != cmaHelloLen {
		return 0, nil
	}
	pid = int(binary.LittleEndian.Uint32(b[0:]))
	if binary.LittleEndian.Uint64(b[8:]) != me.nsDev || binary.LittleEndian.Uint64(b[16:]) != me.nsIno || pid <= 0 {
		return 0, nil
	}
	var got [16]byte
	seg := cmaSeg{addr: binary.LittleEndian.Uint64(b[24:]), n: 16}
	if err := cmaRead(pid, got[:], []cmaSeg{seg}); err != nil {
		return 0, err
	}
	if string(got[:]) != string(b[32:48]) {
		return 0, errors.New("process id names another process (another pid namespace?)")
	}
	return pid, nil
}

// cmaDeniedOnce: a process says once why peers of its host use the socket.
var cmaDeniedOnce sync.Once

// cmaSeg is one buffer of the sender's memory.
type cmaSeg struct{ addr, n uint64 }

// A descriptor follows a flagCMA header on the socket in place of the
// payload: token u64, count u32, pad u32, then count x (address u64,
// length u64). The lengths add up to the header's length.
func encodeCMADesc(token uint64, bufs [][]byte) []byte {
	b := make([]byte, 16, 16+16*len(bufs))
	binary.LittleEndian.PutUint64(b[0:], token)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(bufs)))
	for _, s := range bufs {
		b = binary.LittleEndian.AppendUint64(b, uint64(uintptr(unsafe.Pointer(unsafe.SliceData(s)))))
		b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	}
	return b
}

// readCMADesc reads the descriptor of a message of total bytes.
func readCMADesc(r io.Reader, total uint64) (uint64, []cmaSeg, error) {
	var fixed [16]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return 0, nil, err
	}
	token := binary.LittleEndian.Uint64(fixed[0:])
	n := binary.LittleEndian.Uint32(fixed[8:])
	if n == 0 || n > cmaMaxSegs {
		return 0, nil, fmt.Errorf("%w: %d segments in a descriptor", errBadFrame, n)
	}
	raw := make([]byte, 16*n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return 0, nil, err
	}
	segs := make([]cmaSeg, n)
	var sum uint64
	for i := range segs {
		segs[i] = cmaSeg{binary.LittleEndian.Uint64(raw[16*i:]), binary.LittleEndian.Uint64(raw[16*i+8:])}
		if segs[i].n > maxFrameLen {
			return 0, nil, fmt.Errorf("%w: descriptor segment of %d bytes", errBadFrame, segs[i].n)
		}
		sum += segs[i].n
	}
	if sum != total {
		return 0, nil, fmt.Errorf("%w: descriptor lists %d bytes, header says %d", errBadFrame, sum, total)
	}
	return token, segs, nil
}
