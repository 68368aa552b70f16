package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// fakeGPU describes one mocked device.
type fakeGPU struct {
	uuid, bus string
	// links[l] = the bus id at the remote end of NVLink l ("switch" for an
	// NVSwitch, "" for an inactive link). nil: the driver reports no
	// NVLink at all (GetNvLinkState is NOT_SUPPORTED).
	links []string
}

func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	copy(p.BusId[:], bus)
	return p
}

// fakeHost builds an nvml.Interface mock over gpus. p2p(i, j) answers the
// NVLink P2P query; level(i, j) the common ancestor.
func fakeHost(gpus []fakeGPU, p2p func(i, j int) bool, level func(i, j int) nvml.GpuTopologyLevel) *mock.Interface {
	devs := make([]*mock.Device, len(gpus))
	index := map[*mock.Device]int{}
	for i, g := range gpus {
		g := g
		d := &mock.Device{}
		d.GetNameFunc = func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3", nvml.SUCCESS }
		d.GetUUIDFunc = func() (string, nvml.Return) { return g.uuid, nvml.SUCCESS }
		d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 80 << 30}, nvml.SUCCESS }
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pciInfo(g.bus), nvml.SUCCESS }
		d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
			if g.links == nil {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			if l >= len(g.links) {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			if g.links[l] == "" {
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		d.GetNvLinkRemoteDeviceTypeFunc = func(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
			if g.links[l] == "switch" {
				return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
			}
			return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
		}
		d.GetNvLinkRemotePciInfoFunc = func(l int) (nvml.PciInfo, nvml.Return) {
			return pciInfo(g.links[l]), nvml.SUCCESS
		}
		devs[i] = d
		index[d] = i
	}
	for i, d := range devs {
		i := i
		d.GetP2PStatusFunc = func(o nvml.Device, c nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			if c != nvml.P2P_CAPS_INDEX_NVLINK {
				return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
			}
			if p2p != nil && p2p(i, index[o.(*mock.Device)]) {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			}
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
		d.GetTopologyCommonAncestorFunc = func(o nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			if level == nil {
				return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
			}
			return level(i, index[o.(*mock.Device)]), nvml.SUCCESS
		}
	}
	return &mock.Interface{
		InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return "580.65.06", nvml.SUCCESS },
		DeviceGetCountFunc:         func() (int, nvml.Return) { return len(devs), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
}

func bus(i int) string { return fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10) }

func uuid(i int) string { return fmt.Sprintf("GPU-%08d-0000-0000-0000-000000000000", i) }

func peers(host string, idx ...int) []Peer {
	out := make([]Peer, len(idx))
	for r, i := range idx {
		out[r] = Peer{Host: host, UUID: uuid(i), BusID: bus(i)}
	}
	return out
}

func TestNoDriverMeansNoGPUs(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }}
	topo := Probe(lib)
	if len(topo.GPUs) != 0 || len(topo.Links) != 0 || topo.Error == "" {
		t.Fatalf("no driver: got %+v", topo)
	}
	if ok, why := AllNVLink(topo, "h", peers("h", 0, 1)); ok || !strings.Contains(why, "not known") {
		t.Fatalf("AllNVLink without GPUs: %v %q", ok, why)
	}
}

// The real package-level library on this machine: no driver (or one), no
// crash either way.
func TestProbeRealLibraryDoesNotCrash(t *testing.T) {
	topo := Probe(nvml.New())
	t.Logf("this host: %d GPUs, %d links, error %q", len(topo.GPUs), len(topo.Links), topo.Error)
}

// Four GPUs, direct NVLinks in a ring 0-1-2-3-0 (NV4 each), no 0-2 / 1-3.
func TestDirectNVLinkRing(t *testing.T) {
	gpus := make([]fakeGPU, 4)
	for i := range gpus {
		next, prev := (i+1)%4, (i+3)%4
		links := make([]string, 12)
		for l := 0; l < 4; l++ {
			links[l] = bus(next)
			links[4+l] = bus(prev)
		}
		gpus[i] = fakeGPU{uuid: uuid(i), bus: bus(i), links: links}
	}
	topo := Probe(fakeHost(gpus, nil, func(i, j int) nvml.GpuTopologyLevel { return nvml.TOPOLOGY_NODE }))
	if topo.Error != "" || len(topo.GPUs) != 4 || topo.Driver != "580.65.06" {
		t.Fatalf("probe: %+v", topo)
	}
	for _, g := range topo.GPUs {
		if g.NVLinks != 8 || g.NVSwitch || g.MemoryMB != 80<<10 || g.BusID == "" {
			t.Fatalf("gpu %+v", g)
		}
	}
	want := map[[2]int]string{{0, 1}: KindNVLink, {1, 2}: KindNVLink, {2, 3}: KindNVLink, {0, 3}: KindNVLink, {0, 2}: KindPCIe, {1, 3}: KindPCIe}
	if len(topo.Links) != 6 {
		t.Fatalf("links: %+v", topo.Links)
	}
	for _, l := range topo.SortedLinks() {
		if want[[2]int{l.A, l.B}] != l.Kind {
			t.Fatalf("link %d-%d is %s, want %s", l.A, l.B, l.Kind, want[[2]int{l.A, l.B}])
		}
		if l.Kind == KindNVLink && (l.NVLinks != 4 || l.Via != "direct") {
			t.Fatalf("link %+v: want 4 direct NVLinks", l)
		}
		if l.Kind == KindPCIe && l.Via != "NODE" {
			t.Fatalf("link %+v: want PCIe level NODE", l)
		}
	}
	host := "boot:x"
	if ok, why := AllNVLink(topo, host, peers(host, 0, 1)); !ok {
		t.Fatalf("0,1: %s", why)
	}
	if ok, why := AllNVLink(topo, host, peers(host, 0, 1, 2, 3)); ok || !strings.Contains(why, "PCIe") {
		t.Fatalf("0..3 (0-2 is PCIe): %v %s", ok, why)
	}
	if ok, _ := AllNVLink(topo, host, peers(host, 3, 0)); !ok {
		t.Fatal("3,0 are linked")
	}
	// Two ranks on one GPU are connected; one rank alone is not "all NVLink".
	if ok, _ := AllNVLink(topo, host, peers(host, 1, 1)); !ok {
		t.Fatal("two ranks sharing GPU 1")
	}
	if ok, _ := AllNVLink(topo, host, peers(host, 1)); ok {
		t.Fatal("a single rank")
	}
	// A peer on another host is never NVLink, whatever its GPU.
	p := peers(host, 0, 1)
	p[1].Host = "boot:other"
	if ok, why := AllNVLink(topo, host, p); ok || !strings.Contains(why, "another host") {
		t.Fatalf("remote peer: %v %s", ok, why)
	}
	// Matching by bus id when the UUID is unknown (CUDA's 4-digit domain).
	p = peers(host, 0, 1)
	p[1].UUID = ""
	p[1].BusID = "0000:28:00.0"
	if ok, why := AllNVLink(topo, host, p); !ok {
		t.Fatalf("bus-id match: %s", why)
	}
}

// Eight GPUs on NVSwitches (DGX/HGX): every pair is NVLink-connected.
func TestNVSwitch(t *testing.T) {
	gpus := make([]fakeGPU, 8)
	for i := range gpus {
		links := make([]string, 18)
		for l := range links {
			links[l] = "switch"
		}
		gpus[i] = fakeGPU{uuid: uuid(i), bus: bus(i), links: links}
	}
	topo := Probe(fakeHost(gpus, nil, nil))
	for _, l := range topo.Links {
		if l.Kind != KindNVLink || l.Via != "nvswitch" {
			t.Fatalf("link %+v", l)
		}
	}
	if ok, why := AllNVLink(topo, "h", peers("h", 0, 1, 2, 3, 4, 5, 6, 7)); !ok {
		t.Fatal(why)
	}
	if !topo.GPUs[3].NVSwitch || topo.GPUs[3].NVLinks != 18 {
		t.Fatalf("gpu %+v", topo.GPUs[3])
	}
}

// PCIe-only GPUs (no NVLink reported): the P2P NVLink capability decides;
// here it says no, so everything is PCIe with its level.
func TestPCIeOnly(t *testing.T) {
	gpus := []fakeGPU{{uuid: uuid(0), bus: bus(0)}, {uuid: uuid(1), bus: bus(1)}, {uuid: uuid(2), bus: bus(2)}}
	topo := Probe(fakeHost(gpus, func(i, j int) bool { return false }, func(i, j int) nvml.GpuTopologyLevel {
		if (i == 0 && j == 1) || (i == 1 && j == 0) {
			return nvml.TOPOLOGY_SINGLE
		}
		return nvml.TOPOLOGY_SYSTEM
	}))
	got := map[[2]int]string{}
	for _, l := range topo.Links {
		if l.Kind != KindPCIe {
			t.Fatalf("link %+v", l)
		}
		got[[2]int{l.A, l.B}] = l.Via
	}
	if got[[2]int{0, 1}] != "PIX" || got[[2]int{0, 2}] != "SYS" || got[[2]int{1, 2}] != "SYS" {
		t.Fatalf("levels %v", got)
	}
	if ok, _ := AllNVLink(topo, "h", peers("h", 0, 1)); ok {
		t.Fatal("PCIe pair reported as NVLink")
	}
}

// A driver without per-link queries but with NVLink P2P (some VMs).
func TestP2PFallback(t *testing.T) {
	gpus := []fakeGPU{{uuid: uuid(0), bus: bus(0)}, {uuid: uuid(1), bus: bus(1)}}
	topo := Probe(fakeHost(gpus, func(i, j int) bool { return true }, nil))
	if len(topo.Links) != 1 || topo.Links[0].Kind != KindNVLink || topo.Links[0].Via != "p2p" {
		t.Fatalf("links %+v", topo.Links)
	}
}

func TestNormBusID(t *testing.T) {
	for in, want := range map[string]string{
		"00000000:3B:00.0": "0000:3b:00.0",
		"0000:3b:00.0":     "0000:3b:00.0",
		"3b:00.0":          "0000:3b:00.0",
		"00000001:1A:00.0": "0001:1a:00.0",
	} {
		if got := NormBusID(in); got != want {
			t.Errorf("NormBusID(%q) = %q, want %q", in, got, want)
		}
	}
}
