// Package hosts says which ranks share a host. A host is one machine and
// one network namespace: its ranks reach each other through memory (the
// one-host reads of transport/cma.go) and share one NIC to the others,
// like the GPUs of one node. Every rank publishes its ID through the
// group's Store; Group turns the IDs into the group's layout.
package hosts

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine identifies this machine: the kernel's boot id, which containers
// on one machine share (their hostnames and machine ids may differ), else
// the hostname and machine id; ZIPCCL_HOST_ID overrides it.
func Machine() string {
	if v := os.Getenv("ZIPCCL_HOST_ID"); v != "" {
		return v
	}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return "boot:" + id
		}
	}
	h, _ := os.Hostname()
	for _, f := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id"} {
		if b, err := os.ReadFile(f); err == nil {
			if id := strings.TrimSpace(string(b)); id != "" {
				return h + "/" + id
			}
		}
	}
	return h
}

// NetNS identifies this process's network namespace (the device and inode
// of /proc/self/ns/net; the inode alone repeats across machines).
func NetNS() (dev, ino uint64, err error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return 0, 0, err
	}
	return uint64(st.Dev), st.Ino, nil
}

// ID identifies this process's host: ZIPCCL_HOST_ID verbatim when set,
// else the machine and the network namespace.
func ID() string {
	if v := os.Getenv("ZIPCCL_HOST_ID"); v != "" {
		return v
	}
	dev, ino, err := NetNS()
	if err != nil {
		return Machine() // no namespaces to tell apart
	}
	return fmt.Sprintf("%s/netns:%d:%d", Machine(), dev, ino)
}

// Group returns ranks 0..len(ids)-1 grouped by host: the hosts in the
// order of their lowest rank, each host's ranks ascending. Every rank that
// sees the same ids gets the same layout.
func Group(ids []string) [][]int {
	at := map[string]int{}
	var out [][]int
	for r, id := range ids {
		h, ok := at[id]
		if !ok {
			h = len(out)
			at[id] = h
			out = append(out, nil)
		}
		out[h] = append(out[h], r)
	}
	return out
}

// Equal reports whether layout (group ranks by host, as Group returns)
// covers a group of n ranks with at least two hosts of the same number of
// ranks, at least two each, every rank once: the layouts the hierarchical
// algorithms take.
func Equal(layout [][]int, n int) bool {
	if len(layout) < 2 || len(layout[0]) < 2 || len(layout)*len(layout[0]) != n {
		return false
	}
	for _, host := range layout {
		if len(host) != len(layout[0]) {
			return false
		}
	}
	return Partition(layout, n)
}

// Partition reports whether layout holds each of the ranks 0..n-1 exactly
// once (hosts of any size).
func Partition(layout [][]int, n int) bool {
	seen := make([]bool, n)
	count := 0
	for _, host := range layout {
		for _, r := range host {
			if r < 0 || r >= n || seen[r] {
				return false
			}
			seen[r] = true
			count++
		}
	}
	return count == n
}

// Where finds rank in layout: its host and its local index there (-1, -1
// when absent).
func Where(layout [][]int, rank int) (host, local int) {
	for h, ranks := range layout {
		for l, r := range ranks {
			if r == rank {
				return h, l
			}
		}
	}
	return -1, -1
}

// Rail is the ranks of local index l on every host, in host order (the
// ranks that talk across hosts in the hierarchical algorithms).
func Rail(layout [][]int, l int) []int {
	out := make([]int, len(layout))
	for h, ranks := range layout {
		out[h] = ranks[l]
	}
	return out
}
