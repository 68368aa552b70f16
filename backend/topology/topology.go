// Package topology describes the GPUs of this host and the links between
// them, as the NVIDIA driver reports them through NVML (go-nvml, which loads
// libnvidia-ml at run time: no driver means "no GPUs", never a crash).
//
// Two GPUs are NVLink-connected when one of them has an active NVLink whose
// remote end is the other's PCI bus id, when both have an active NVLink to
// an NVSwitch (every GPU on the switch fabric reaches every other), or, where
// the driver does not report links one by one, when NVML's P2P status for
// the NVLink capability is OK. Otherwise they talk over PCIe (or the host);
// the PCIe level is NVML's common-ancestor level.
//
// The GPU path uses AllNVLink to decide whether a group's peers all sit on
// one host behind NVLink, where compression never pays (UCCL-Zip and ZipCCL
// both measured it losing there), and the switcher is told so through
// switcher.Profile.NoCompress.
package topology

import (
	"fmt"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// GPU is one device seen by the driver. Index is NVML's (which ignores
// CUDA_VISIBLE_DEVICES); UUID and BusID identify it across processes.
type GPU struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	UUID     string `json:"uuid"`
	BusID    string `json:"pci_bus_id,omitempty"`
	MemoryMB uint64 `json:"memory_mb"`
	NVLinks  int    `json:"nvlinks"`            // active NVLinks
	NVSwitch bool   `json:"nvswitch,omitempty"` // at least one link ends at an NVSwitch
}

// Link kinds.
const (
	KindNVLink = "nvlink"
	KindPCIe   = "pcie"
)

// Link is the connection between two GPUs (A < B, NVML indices).
type Link struct {
	A       int    `json:"a"`
	B       int    `json:"b"`
	Kind    string `json:"kind"`              // KindNVLink or KindPCIe
	NVLinks int    `json:"nvlinks,omitempty"` // direct links between the two (0 through a switch)
	Via     string `json:"via,omitempty"`     // "direct", "nvswitch" or "p2p" for NVLink; the PCIe level otherwise
}

// Topology is what Probe found.
type Topology struct {
	GPUs   []GPU  `json:"gpus"`
	Links  []Link `json:"links"`
	Driver string `json:"driver_version,omitempty"`
	Error  string `json:"error,omitempty"` // why there are no GPUs (e.g. no driver)
}

// Probe asks NVML. lib is nvml.New() (or a mock in tests); Probe calls its
// Init and Shutdown.
func Probe(lib nvml.Interface) Topology {
	t := Topology{GPUs: []GPU{}, Links: []Link{}}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Error = ret.String()
		return t
	}
	defer lib.Shutdown()
	t.Driver, _ = lib.SystemGetDriverVersion()
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		t.Error = ret.String()
		return t
	}
	var devs []nvml.Device
	busIndex := map[string]int{} // normalised bus id -> index in t.GPUs
	for i := 0; i < n; i++ {
		d, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		g := GPU{Index: i}
		g.Name, _ = d.GetName()
		g.UUID, _ = d.GetUUID()
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			g.MemoryMB = mem.Total >> 20
		}
		if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
			g.BusID = busID(pci)
			busIndex[NormBusID(g.BusID)] = len(t.GPUs)
		}
		t.GPUs = append(t.GPUs, g)
		devs = append(devs, d)
	}
	// direct[i][j]: NVLinks from GPU i whose remote end is GPU j.
	direct := make([][]int, len(devs))
	linksQueried := make([]bool, len(devs))
	for i, d := range devs {
		direct[i] = make([]int, len(devs))
		for l := 0; l < nvml.NVLINK_MAX_LINKS; l++ {
			state, ret := d.GetNvLinkState(l)
			if ret != nvml.SUCCESS {
				// NOT_SUPPORTED / INVALID_ARGUMENT past the last link, or
				// no NVLink at all.
				continue
			}
			linksQueried[i] = true
			if state != nvml.FEATURE_ENABLED {
				continue
			}
			t.GPUs[i].NVLinks++
			if kind, ret := d.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS && kind == nvml.NVLINK_DEVICE_TYPE_SWITCH {
				t.GPUs[i].NVSwitch = true
				continue
			}
			if pci, ret := d.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
				if j, ok := busIndex[NormBusID(busID(pci))]; ok && j != i {
					direct[i][j]++
				}
			}
		}
	}
	for i := range devs {
		for j := i + 1; j < len(devs); j++ {
			link := Link{A: t.GPUs[i].Index, B: t.GPUs[j].Index, Kind: KindPCIe}
			switch n := max(direct[i][j], direct[j][i]); {
			case n > 0:
				link.Kind, link.NVLinks, link.Via = KindNVLink, n, "direct"
			case t.GPUs[i].NVSwitch && t.GPUs[j].NVSwitch:
				link.Kind, link.Via = KindNVLink, "nvswitch"
			case !linksQueried[i] || !linksQueried[j]:
				// The driver did not report links one by one: ask for
				// the NVLink P2P capability instead.
				if st, ret := devs[i].GetP2PStatus(devs[j], nvml.P2P_CAPS_INDEX_NVLINK); ret == nvml.SUCCESS && st == nvml.P2P_STATUS_OK {
					link.Kind, link.Via = KindNVLink, "p2p"
				}
			}
			if link.Kind == KindPCIe {
				if lvl, ret := devs[i].GetTopologyCommonAncestor(devs[j]); ret == nvml.SUCCESS {
					link.Via = LevelName(lvl)
				}
			}
			t.Links = append(t.Links, link)
		}
	}
	return t
}

// LevelName names an NVML topology level as nvidia-smi topo does.
func LevelName(l nvml.GpuTopologyLevel) string {
	switch l {
	case nvml.TOPOLOGY_INTERNAL:
		return "internal"
	case nvml.TOPOLOGY_SINGLE:
		return "PIX" // one PCIe switch
	case nvml.TOPOLOGY_MULTIPLE:
		return "PXB" // several PCIe switches
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return "PHB" // a PCIe host bridge
	case nvml.TOPOLOGY_NODE:
		return "NODE" // host bridges within one NUMA node
	case nvml.TOPOLOGY_SYSTEM:
		return "SYS" // across NUMA nodes
	}
	return fmt.Sprintf("level %d", int(l))
}

func busID(p nvml.PciInfo) string {
	b := p.BusId[:]
	if i := indexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	if len(b) == 0 {
		return fmt.Sprintf("%08x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
	}
	return string(b)
}

func indexByte(b []uint8, c uint8) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// NormBusID makes PCI bus ids comparable: NVML writes an 8-digit domain
// ("00000000:3B:00.0"), CUDA a 4-digit one ("0000:3b:00.0").
func NormBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	if strings.Count(rest, ":") == 0 { // "bus:dev.fn" without a domain
		return "0000:" + s
	}
	dom = strings.TrimLeft(dom, "0")
	for len(dom) < 4 {
		dom = "0" + dom
	}
	return dom + ":" + rest
}

// ByUUID returns the index in t.GPUs of the GPU with this UUID, or -1.
func (t Topology) ByUUID(uuid string) int {
	for i, g := range t.GPUs {
		if g.UUID == uuid && uuid != "" {
			return i
		}
	}
	return -1
}

// ByBusID returns the index in t.GPUs of the GPU at this PCI bus id, or -1.
func (t Topology) ByBusID(bus string) int {
	n := NormBusID(bus)
	for i, g := range t.GPUs {
		if g.BusID != "" && NormBusID(g.BusID) == n {
			return i
		}
	}
	return -1
}

// Find returns the index in t.GPUs of the GPU with this UUID, else at this
// bus id, or -1.
func (t Topology) Find(uuid, bus string) int {
	if i := t.ByUUID(uuid); i >= 0 {
		return i
	}
	if bus != "" {
		return t.ByBusID(bus)
	}
	return -1
}

// NVLinked reports whether GPUs i and j (indices in t.GPUs) are connected by
// NVLink. A GPU is trivially "linked" to itself.
func (t Topology) NVLinked(i, j int) bool {
	if i == j {
		return true
	}
	a, b := t.GPUs[min(i, j)].Index, t.GPUs[max(i, j)].Index
	for _, l := range t.Links {
		if l.A == a && l.B == b {
			return l.Kind == KindNVLink
		}
	}
	return false
}

// Peer is what a rank publishes about its GPU for the others.
type Peer struct {
	Host  string `json:"host"`
	UUID  string `json:"uuid"`
	BusID string `json:"pci_bus_id"`
}

// AllNVLink reports whether every peer runs on this host (host is this
// host's id) and every pair of their GPUs is NVLink-connected according to
// t, with a reason either way. Ranks sharing one GPU count as connected.
// A single peer is not "all NVLink" (nothing travels). Every rank of a
// group that sees the same peers and the same host topology reaches the
// same answer.
func AllNVLink(t Topology, host string, peers []Peer) (bool, string) {
	if len(peers) < 2 {
		return false, "a single rank"
	}
	idx := make([]int, len(peers))
	for r, p := range peers {
		if p.Host != host {
			return false, fmt.Sprintf("rank %d runs on another host (%s)", r, p.Host)
		}
		if idx[r] = t.Find(p.UUID, p.BusID); idx[r] < 0 {
			return false, fmt.Sprintf("rank %d's GPU (%s) is not known to NVML here", r, firstNonEmpty(p.UUID, p.BusID, "unknown"))
		}
	}
	for a := range idx {
		for b := a + 1; b < len(idx); b++ {
			if !t.NVLinked(idx[a], idx[b]) {
				return false, fmt.Sprintf("ranks %d and %d are connected over PCIe, not NVLink", a, b)
			}
		}
	}
	return true, fmt.Sprintf("all %d ranks on one host, every pair of GPUs NVLink-connected", len(peers))
}

func firstNonEmpty(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// SortedLinks returns t.Links ordered by (A, B), for stable output.
func (t Topology) SortedLinks() []Link {
	out := append([]Link(nil), t.Links...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].A != out[j].A {
			return out[i].A < out[j].A
		}
		return out[i].B < out[j].B
	})
	return out
}
