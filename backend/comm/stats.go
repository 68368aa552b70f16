package comm

import (
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"

	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/switcher"
)

// OpStats accumulates one op kind's traffic on one communicator.
type OpStats struct {
	Count     int64 `json:"count"`
	Errors    int64 `json:"errors"`
	RawBytes  int64 `json:"raw_bytes"`  // the op's payload as the user sees it
	WireBytes int64 `json:"wire_bytes"` // payload bytes this rank sent (frame headers excluded)
	// UncodedBytes is what those sends stand for uncoded (the decoded
	// length of each coded message); Ratio is uncoded_bytes/wire_bytes, the
	// compression the wire saw (1 for uncoded ops, whatever the algorithm).
	UncodedBytes int64   `json:"uncoded_bytes"`
	Ratio        float64 `json:"ratio"`
	Seconds      float64 `json:"seconds"` // from start to completion, summed
	// CodecSeconds is the time spent coding and decoding; WireSeconds the
	// rest of the op's time (transfers, waiting, reductions).
	CodecSeconds float64 `json:"codec_seconds"`
	WireSeconds  float64 `json:"wire_seconds"`
	// Choices counts the switcher's decisions: "raw" (uncompressed
	// algorithms), "plain" (two-shot family, uncoded), or the codec kind.
	Choices map[string]int64 `json:"choices"`
	// Overrides counts the calls that the switcher's measured feedback
	// ran another way than its cost model chose (counted in Choices as
	// they ran).
	Overrides int64 `json:"feedback_overrides"`
	// CUDA tensors on the coded path: ops coded on the GPU, and ops the
	// engine staged through host memory (uncoded decisions, or what the
	// GPU does not code).
	GPUCoded  int64 `json:"gpu_coded"`
	GPUStaged int64 `json:"gpu_staged"`
	// The calls the group's lossy policy coded, and their bytes (RawBytes'
	// measure), per mode.
	LossyCalls map[string]int64 `json:"lossy_calls"`
	LossyBytes map[string]int64 `json:"lossy_bytes"`
}

type stats struct {
	mu  sync.Mutex
	ops map[string]*OpStats
}

func (s *stats) init() { s.ops = map[string]*OpStats{} }

func byteLen(bufs [][]byte) int64 {
	var n int64
	for _, b := range bufs {
		n += int64(len(b))
	}
	return n
}

// record adds one op; uncoded 0 means its sends were not coded (uncoded
// equals wire).
func (s *stats) record(op *Op, wire, uncoded int64, d, codec time.Duration, dec switcher.Decision, gpuCoded bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.ops[op.Kind.String()]
	if st == nil {
		st = &OpStats{Choices: map[string]int64{}, LossyCalls: map[string]int64{}, LossyBytes: map[string]int64{}}
		s.ops[op.Kind.String()] = st
	}
	st.Choices[dec.Label()]++
	if dec.Measured {
		st.Overrides++
	}
	switch {
	case op.Dev == nil || !op.Dev.Engine:
	case gpuCoded:
		st.GPUCoded++
	default:
		st.GPUStaged++
	}
	st.CodecSeconds += codec.Seconds()
	st.WireSeconds += max(d-codec, 0).Seconds()
	st.Count++
	if err != nil {
		st.Errors++
	}
	st.RawBytes += byteLen(op.In)
	if op.lossy.Mode != quant.None {
		st.LossyCalls[op.lossy.Mode.String()]++
		st.LossyBytes[op.lossy.Mode.String()] += byteLen(op.In)
	}
	st.WireBytes += wire
	if uncoded <= 0 {
		uncoded = wire
	}
	st.UncodedBytes += uncoded
	st.Seconds += d.Seconds()
}

// Stats returns a snapshot of the per-op statistics as JSON.
func (c *Comm) Stats() ([]byte, error) {
	c.stats.mu.Lock()
	defer c.stats.mu.Unlock()
	out := map[string]any{"rank": c.cfg.Rank, "size": c.cfg.Size, "group": c.cfg.Name,
		// whether, never what: the key stays out of every report
		"auth_key": c.mesh != nil && c.mesh.HasAuthKey(), "encrypted": c.mesh != nil && c.mesh.Encrypts(),
		"lossy": c.Policy().String()}
	ops := map[string]OpStats{}
	for k, v := range c.stats.ops {
		x := *v
		x.Choices = maps.Clone(v.Choices)
		x.LossyCalls, x.LossyBytes = maps.Clone(v.LossyCalls), maps.Clone(v.LossyBytes)
		x.Ratio = 1
		if x.WireBytes > 0 {
			x.Ratio = float64(x.UncodedBytes) / float64(x.WireBytes)
		}
		ops[k] = x
	}
	out["ops"] = ops
	out["link"] = c.linkModel()
	return json.Marshal(out)
}

// linkModel is the group's link as the switcher measured it (the worst
// link's latency and bandwidth, the same on every rank; see probe), for
// callers that size their own messages (zipccl.link_model). It is measured
// at the first op the switcher could code under compression auto; before
// that, or under another mode, only "measured": false.
func (c *Comm) linkModel() map[string]any {
	z := c.shared.Load()
	if z == nil || !z.profile.Measured || z.profile.Beta <= 0 {
		return map[string]any{"measured": false}
	}
	return map[string]any{"measured": true, "latency_s": z.profile.Alpha,
		"bytes_per_s": 1 / z.profile.Beta, "local": z.profile.NoCompress}
}

func (s *stats) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.ops))
	for k := range s.ops {
		names = append(names, k)
	}
	sort.Strings(names)
	out := ""
	var uncoded, wire int64
	var codec float64
	for _, k := range names {
		v := s.ops[k]
		out += fmt.Sprintf(" %s=%d", k, v.Count)
		uncoded += v.UncodedBytes
		wire += v.WireBytes
		codec += v.CodecSeconds
	}
	if out == "" {
		return "no ops"
	}
	ratio := 1.0
	if wire > 0 {
		ratio = float64(uncoded) / float64(wire)
	}
	return fmt.Sprintf("ops:%s; %d bytes sent for %d uncoded (ratio %.3f), %.3fs coding", out, wire, uncoded, ratio, codec)
}
