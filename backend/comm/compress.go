package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/zipccl/zipccl/backend/codec"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/transport"
)

// compression is a group's compression state. Everything in it is agreed:
// the mode is checked through the op descriptor, the profile is folded
// over the group when measured, and the ratio estimates are folded by every
// op's check, so every rank takes the same decision for every op.
type compression struct {
	mode    switcher.Mode
	th      switcher.Defaults
	profile switcher.Profile
	// local: every link of the group stays inside one network namespace.
	// It is learned from the check of the first op after the ring's
	// connections exist (whereKnown), or measured with the profile, and is
	// false before. The switcher sees the profile's copy as
	// profile.NoCompress; the algorithms pick local variants with it.
	local      bool
	whereKnown bool
	ratios     map[dtype.DType][3]float64 // by dtype, by codec kind
}

// configureCompression reads the group option "compress" (or the
// "compression" that zipccl.Options sends), else ZIPCCL_COMPRESS, and the
// optional size thresholds.
func configureCompression(opts map[string]string) (compression, error) {
	z := compression{th: switcher.DefaultThresholds, ratios: map[dtype.DType][3]float64{}}
	mode := os.Getenv("ZIPCCL_COMPRESS")
	for _, k := range []string{"compression", "compress"} {
		if v, ok := opts[k]; ok {
			mode = v
		}
	}
	var err error
	if z.mode, err = switcher.ParseMode(mode); err != nil {
		return z, err
	}
	for key, dst := range map[string]*int{"compress_min": &z.th.CompressMin, "two_shot_min": &z.th.TwoShotMin} {
		v, ok := opts[key]
		if !ok {
			v = os.Getenv("ZIPCCL_" + map[string]string{"compress_min": "COMPRESS_MIN", "two_shot_min": "TWO_SHOT_MIN"}[key])
		}
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return z, fmt.Errorf("zipccl: option %s=%q is not a byte count", key, v)
		}
		*dst = n
	}
	return z, nil
}

// publish shares the executor's latest agreed state with p2p senders.
func (c *Comm) publish() {
	z := c.z
	z.ratios = maps.Clone(c.z.ratios)
	c.shared.Store(&z)
}

// payload is the op's size as the switcher counts it. It is the same on
// every rank that called the same op, except for all_to_all, whose splits
// may differ from rank to rank (see agreeSizeFirst).
func payload(op *Op) int {
	switch op.Kind {
	case opkind.AllGather:
		return int(byteLen(op.Out))
	case opkind.ReduceScatter, opkind.AllToAll:
		return int(byteLen(op.In))
	}
	if len(op.In) > 0 {
		return len(op.In[0])
	}
	return 0
}

// switcherInput is op as the switcher sees it, with size as its payload.
func (c *Comm) switcherInput(op *Op, size int) (switcher.Input, bool) {
	sop, ok := switcher.OpOf(op.Kind)
	if !ok {
		return switcher.Input{}, false
	}
	in := switcher.Input{
		Op: sop, DType: op.DType, Bytes: size, Ranks: c.cfg.Size,
		Mode: c.z.mode, Profile: c.z.profile, Ratio: c.z.ratios[op.DType],
	}
	if fromDevice(op) {
		zip3Only(&in)
	}
	return in, true
}

// zip3Only makes the switcher choose between raw and zip3 (see fromDevice).
func zip3Only(in *switcher.Input) {
	in.Profile.Enc[codec.Huff], in.Profile.Dec[codec.Huff] = 0, 0
}

// agreeSizeFirst says whether op's decision needs the group's largest
// payload, agreed by the check before the data moves: an all_to_all whose
// decision could depend on its size, when the group has not yet agreed the
// size of an earlier one of its dtype (see sizeOf). Each rank knows only
// its own splits, and ranks deciding on different sizes would run
// different protocols. Where the switcher codes no size of it (links all
// local, data that does not compress, a codec slower than the wire), every
// rank runs it uncoded whatever the sizes. (Before the group has measured
// itself, a compressible all_to_all of any size measures it: wantsProbe.)
func (c *Comm) agreeSizeFirst(op *Op) bool {
	if op.Kind != opkind.AllToAll {
		return false
	}
	if _, known := c.a2aSize[op.DType]; known {
		return false
	}
	in, ok := c.switcherInput(op, 0)
	return ok && switcher.CodesAtSomeSize(in, c.z.th)
}

// sizeOf is the payload op is decided on, and whether every rank decides
// on that same figure. For an all_to_all it is the largest payload of the
// last one of its dtype, agreed by that call's check: the ranks know only
// their own splits, and MoE layers repeat calls of about the same size
// (same batch, other routing), so the last agreed size stands in for this
// one's without a round of messages before the data. A call whose size
// differs a lot from the last one may then be coded where raw would be
// faster, or the other way round, once.
func (c *Comm) sizeOf(op *Op, own int) (int, bool) {
	if op.Kind != opkind.AllToAll {
		return own, true
	}
	s, known := c.a2aSize[op.DType]
	if !known {
		return own, false
	}
	return s, true
}

// decide sets t.decision, the switcher's call for op with payload size
// (the zero Decision for ops it does not handle), checked against measured
// times by the group's feedback, and the key the feedback times the call
// under. The returned step is committed once the op is agreed.
func (c *Comm) decide(op *Op, t *task, size int) switcher.Step {
	if op.lossy.Mode != quant.None { // the user's policy, not the switcher's call
		t.keyed, t.decision = false, switcher.Decision{Why: "lossy " + op.lossy.Mode.String() + " (the group's policy)"}
		return switcher.Step{}
	}
	in, ok := c.switcherInput(op, size)
	if ok && t.hosts != nil {
		// Hierarchical: coding only changes the rails' part (inside a host
		// nothing is coded), so the model costs one rail's op: H ranks, the
		// R-th part of the payload; a broadcast's chain crosses the H hosts
		// with the whole of it, and an all_to_all's rail rank sends about
		// its own payload's off-host part ((H-1)/H of it, R blocks of a
		// R-th each per host), as an H-rank all_to_all of the whole payload.
		in.Ranks = len(t.hosts)
		if op.Kind != opkind.Broadcast && op.Kind != opkind.AllToAll {
			in.Bytes = size / t.hosts.Rails()
		}
	}
	t.keyed, t.key = ok && c.z.mode == switcher.Auto, switcher.KeyOf(in)
	if !ok {
		t.decision = switcher.Decision{}
		return switcher.Step{}
	}
	var st switcher.Step
	t.decision, st = c.fb.Decide(in, c.z.th)
	return st
}

// lastCall is the previous collective as the switcher's feedback needs it.
// Its key and how it ran are agreed; its time is this rank's own, so it
// travels with the next collective's check, which folds it over the group
// (foldPrev; +Inf, ignored, if it failed anywhere).
type lastCall struct {
	keyed bool
	key   switcher.Key
	kind  codec.Kind // how it ran: codec.Raw when uncoded
	sec   float64
}

// callSeconds measures a call that started at start; tests replace it.
var callSeconds = func(start time.Time, _ switcher.Decision) float64 { return time.Since(start).Seconds() }

// timed remembers t, which started at start and ended with err, as the
// previous collective.
func (c *Comm) timed(t *task, start time.Time, err error) {
	c.last = lastCall{keyed: t.keyed, key: t.key, sec: math.Inf(1)}
	if t.decision.Coded {
		c.last.kind = t.decision.Kind
	}
	if err == nil {
		c.last.sec = callSeconds(start, t.decision)
	}
}

// takeLast returns the previous collective and forgets it: its time is
// reported by the next check only.
func (c *Comm) takeLast() lastCall {
	l := c.last
	c.last = lastCall{}
	return l
}

// wantsProbe says whether op, with payload size, is the first one that
// could be coded under Auto before the group measured itself. The answer
// is the same on every rank that called the same op after the same
// history. An all_to_all measures the group whatever its size: its ranks
// know only their own sizes, and until the group is measured each of them
// would have to agree its size first, call after call (agreeSizeFirst).
func (c *Comm) wantsProbe(op *Op, size int) bool {
	if c.z.mode != switcher.Auto || c.z.profile.Measured || c.cfg.Size == 1 {
		return false
	}
	_, ok := switcher.OpOf(op.Kind)
	return ok && switcher.Compressible(op.DType) && (size >= c.z.th.CompressMin || op.Kind == opkind.AllToAll)
}

// where is this rank's part of telemetry.where (ringWhere), or 0 once the
// group knows.
func (c *Comm) where() float64 {
	if c.z.whereKnown {
		return 0
	}
	return c.ringWhere()
}

// ringWhere says whether the links to this rank's ring neighbours (the
// ones the check and the probe connect first) stay in this network
// namespace: whereLocal, whereRemote, or whereUnknown while one is not
// connected. If every ring link is local, every pair is.
func (c *Comm) ringWhere() float64 {
	n, me := c.cfg.Size, c.cfg.Rank
	w := float64(whereLocal)
	for _, p := range []int{(me + 1) % n, (me - 1 + n) % n} {
		switch local, known := c.mesh.PeerLocality(p); {
		case !known:
			w = max(w, whereUnknown)
		case !local:
			w = whereRemote
		}
	}
	return w
}

// estimate samples the op's local data for the check's telemetry.
func (c *Comm) estimate(t *task) telemetry {
	op := t.op
	if c.z.mode == switcher.Never || !switcher.Compressible(op.DType) || len(op.In) == 0 {
		return telemetry{}
	}
	best := sampleOf(t)
	if len(best) < 4096 {
		return telemetry{}
	}
	return telemetry{
		zip3: codec.EstimateRatio(best, op.DType, codec.Zip3),
		huff: codec.EstimateRatio(best, op.DType, codec.Huff),
	}
}

// learn folds the group's agreed telemetry into the switcher's state: the
// previous collective's time, and the ratios used for later ops of the
// same dtype.
func (c *Comm) learn(op *Op, prev lastCall, t telemetry) {
	if prev.keyed {
		c.fb.Record(prev.key, prev.kind, t.prev)
	}
	dt := op.DType
	if op.Kind == opkind.AllToAll {
		if c.a2aSize == nil {
			c.a2aSize = map[dtype.DType]int{}
		}
		c.a2aSize[dt] = int(t.size)
	}
	if !c.z.whereKnown && (t.where == whereLocal || t.where == whereRemote) {
		c.z.local, c.z.whereKnown = t.where == whereLocal, true
		c.publish()
	}
	r := c.z.ratios[dt]
	if t.zip3 > 0 {
		r[codec.Zip3] = t.zip3
	}
	if t.huff > 0 {
		r[codec.Huff] = t.huff
	}
	if r != c.z.ratios[dt] {
		c.z.ratios[dt] = r
		c.publish()
	}
}

// Probe sizes: latency rounds of one byte, bandwidth rounds of probeBytes,
// and at most probeSample bytes of the op's data coded.
const (
	probeRounds = 3
	probeBytes  = 4 << 20
	probeSample = 1 << 20
	// probeMinSample: a rank whose data is smaller times the codec on
	// codec.StandIn instead.
	probeMinSample = 64 << 10
)

// probe measures the group once: latency and bandwidth around the ring
// (every rank sends to its right neighbour while receiving from its left,
// so every link is measured at once), and the codec's speed on this op's
// own data. The results are folded over the group (the worst link, the
// slowest coder) so every rank holds the same profile. It runs under the
// op's sequence number on reserved slots, after the op was agreed.
func (c *Comm) probe(ctx context.Context, conn *opConn, t *task) error {
	op := t.op
	n, me := c.cfg.Size, c.cfg.Rank
	right, left := (me+1)%n, (me-1+n)%n
	slot := uint32(probeSlot | 0x100)
	exchange := func(out, in []byte) (time.Duration, error) {
		start := time.Now()
		pending := c.mesh.Post(left, transport.Key{Kind: transport.Coll, Seq: conn.seq, Slot: slot}, in, nil)
		err := c.mesh.Send(ctx, right, transport.Key{Kind: transport.Coll, Seq: conn.seq, Slot: slot}, &conn.desc, out)
		slot++
		if err != nil {
			done, stop := context.WithCancel(ctx)
			stop()
			pending.Wait(done)
			return 0, &peerOpError{peer: right, send: true, err: err}
		}
		if _, err := pending.Wait(ctx); err != nil {
			return 0, &peerOpError{peer: left, err: err}
		}
		return time.Since(start), nil
	}
	var one [1]byte
	alpha := math.Inf(1)
	for i := 0; i < probeRounds; i++ {
		d, err := exchange(one[:], one[:])
		if err != nil {
			return err
		}
		alpha = min(alpha, d.Seconds())
	}
	big := c.pool.Get(2 * probeBytes)
	defer c.pool.Put(big)
	beta := math.Inf(1)
	for i := 0; i < 3; i++ {
		d, err := exchange(big[:probeBytes], big[probeBytes:])
		if err != nil {
			return err
		}
		beta = min(beta, (d.Seconds()-alpha)/probeBytes)
	}
	beta = max(beta, 1e-12)

	var speeds [4]float64 // enc zip3, dec zip3, enc huff, dec huff
	if t.dev != nil {
		// the GPU codes this rank's share (zip3 only: huff stays 0, so the
		// group never picks it)
		speeds[0], speeds[1] = deviceCodecSpeed(t)
	} else {
		sample := sampleOf(t)
		sample = sample[:min(len(sample), probeSample)/op.DType.Size()*op.DType.Size()]
		if len(sample) < probeMinSample {
			// this rank sends little or nothing (an all_to_all's splits):
			// time the codec on typical weights instead, since a per-call
			// overhead or no data at all would set the group's speed near
			// zero for good
			sample = codec.StandIn(op.DType, probeSample)
		}
		for i, k := range []codec.Kind{codec.Zip3, codec.Huff} {
			enc, dec := codecSpeed(sample, op.DType, k)
			speeds[2*i], speeds[2*i+1] = enc, dec
		}
	}
	// Fold: latency and per-byte cost to the group's maximum, speeds to
	// its minimum. Encoded as float64s; speeds are negated so one max
	// merges everything.
	// remote: whether a link leaves this rank's network namespace. Between
	// ranks of one namespace (loopback, same host) a "transfer" is a kernel
	// memory copy on the same cores the codec would use, so coding cannot
	// pay there. The exchanges above connected both ring links.
	remote := 0.0
	if c.ringWhere() != whereLocal {
		remote = 1
	}
	rec := make([]byte, 8*7)
	vals := []float64{alpha, beta, -speeds[0], -speeds[1], -speeds[2], -speeds[3], remote}
	for i, v := range vals {
		binary.LittleEndian.PutUint64(rec[8*i:], math.Float64bits(v))
	}
	merge := func(mine, theirs []byte) {
		for i := 0; i+8 <= len(mine); i += 8 {
			a := math.Float64frombits(binary.LittleEndian.Uint64(mine[i:]))
			b := math.Float64frombits(binary.LittleEndian.Uint64(theirs[i:]))
			binary.LittleEndian.PutUint64(mine[i:], math.Float64bits(max(a, b)))
		}
	}
	if err := c.fold(ctx, conn.seq, probeSlot, &conn.desc, rec, merge); err != nil {
		return err
	}
	for i := range vals {
		vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(rec[8*i:]))
	}
	local := vals[6] == 0
	p := switcher.Profile{Measured: true, Alpha: vals[0], Beta: vals[1], NoCompress: local}
	p.Enc[codec.Zip3], p.Dec[codec.Zip3] = -vals[2], -vals[3]
	p.Enc[codec.Huff], p.Dec[codec.Huff] = -vals[4], -vals[5]
	c.z.profile, c.z.local, c.z.whereKnown = p, local, true
	c.publish()
	where := "links between network namespaces or hosts"
	if local {
		where = "every link inside one network namespace: compression off under auto"
	}
	c.log.Infof("link profile: latency %.0fus, %.2f GB/s on the slowest link; codec zip3 %.2f/%.2f GB/s, huff %.2f/%.2f GB/s (encode/decode, slowest rank); %s",
		p.Alpha*1e6, 1e-9/p.Beta, p.Enc[codec.Zip3]/1e9, p.Dec[codec.Zip3]/1e9, p.Enc[codec.Huff]/1e9, p.Dec[codec.Huff]/1e9, where)
	return nil
}

// codecSpeedRuns: the codec's speed is the fastest of this many timed runs
// (after a warm-up), so that one preemption on a busy machine does not make
// the group (which keeps its slowest rank's figure) give up on coding.
const codecSpeedRuns = 4

// codecSpeed times encodes and decodes of sample with kind k, in raw bytes
// per second.
func codecSpeed(sample []byte, dt dtype.DType, k codec.Kind) (enc, dec float64) {
	if len(sample) == 0 {
		return 0, 0
	}
	e, d := codec.NewEncoder(), codec.NewDecoder()
	frame := make([]byte, 0, codec.MaxEncodedLen(len(sample), dt))
	out := make([]byte, len(sample))
	encT, decT := time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)
	for i := 0; i <= codecSpeedRuns; i++ {
		start := time.Now()
		f, err := e.Encode(frame[:0], sample, dt, k)
		te := time.Since(start)
		if err != nil {
			return 0, 0
		}
		start = time.Now()
		if _, err := d.Decode(out, f); err != nil {
			return 0, 0
		}
		if td := time.Since(start); i > 0 { // run 0 warms scratch and caches
			encT, decT = min(encT, te), min(decT, td)
		}
	}
	return float64(len(sample)) / max(encT.Seconds(), 1e-9), float64(len(sample)) / max(decT.Seconds(), 1e-9)
}
