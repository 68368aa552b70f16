package gpu

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/reduce"
	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/zlog"
)

// Buf is a region of device memory.
type Buf struct {
	Ptr   uintptr
	Bytes int
}

// Op is one op on CUDA tensors. Buffer conventions are those of
// capi/zipccl_abi.h.
type Op struct {
	Kind     opkind.Kind
	DType    dtype.DType
	ReduceOp reduce.Op
	Root     int // rooted ops: the root; Send: destination; Recv: source
	Tag      int64
	PreMul   float64
	In, Out  []Buf
	Device   int     // CUDA device index
	Stream   uintptr // the cudaStream_t to enqueue on
	Done     uintptr // the shim's end-event handle (QueryFunc)
	Defer    bool    // coalescing: enqueue at Flush, in one NCCL group
	Timeout  time.Duration
	Label    string // "all_reduce(float32, 1024 elements, SUM)", for messages

	// OnDone is called exactly once for an op Submit accepted: with nil
	// when its end event completed, or with the failure.
	OnDone func(err error)

	// Set by Submit, for statistics.
	Decision switcher.Decision
	Wire     int64 // payload bytes this rank sent (coded ops)
}

// Config describes one rank's view of a group.
type Config struct {
	Rank, Size int
	Name       string
	Store      rendezvous.Store
	Log        *zlog.Logger
	Mode       switcher.Mode
	Thresholds switcher.Defaults
	// Ctx is cancelled when the group breaks or is torn down: in-flight
	// device ops then fail and the NCCL communicators are aborted.
	Ctx context.Context
	// OnBroken is told when a device failure (timeout, NCCL error) made
	// the group unusable.
	OnBroken func(reason error)
	Env      *Env // nil: the process's
}

// Group is one rank's GPU side of a communicator, created with it and set
// up lazily at its first CUDA op.
type Group struct {
	cfg Config
	env *Env
	log *zlog.Logger

	mu       sync.Mutex // the submitting side
	mine     *Caps
	coll     *agreement
	pair     map[int]*agreement
	device   int
	comm     ncclComm
	pairs    map[int]ncclComm
	deferred []*Op
	profile  switcher.Profile
	scratch  map[int]devBuf
	probed   bool

	cmu   sync.Mutex // every communicator created, for Abort from any goroutine
	comms []ncclComm

	wmu      sync.Mutex // the watcher
	wcond    *sync.Cond
	queues   map[uintptr][]*flight
	nflight  int
	broken   error
	closed   bool
	watching bool
}

type flight struct {
	op       *Op
	deadline time.Time
}

type devBuf struct {
	p uintptr
	n int64
}

// NewGroup prepares the GPU side of a group; it touches nothing.
func NewGroup(cfg Config) *Group {
	if cfg.Env == nil {
		cfg.Env = defaultEnv
	}
	if cfg.Log == nil {
		cfg.Log = zlog.New(cfg.Rank, cfg.Name)
	}
	if cfg.Ctx == nil {
		cfg.Ctx = context.Background()
	}
	if cfg.Thresholds == (switcher.Defaults{}) {
		cfg.Thresholds = switcher.DefaultThresholds
	}
	g := &Group{cfg: cfg, env: cfg.Env, log: cfg.Log, device: -1, pair: map[int]*agreement{},
		pairs: map[int]ncclComm{}, scratch: map[int]devBuf{}, queues: map[uintptr][]*flight{}}
	g.wcond = sync.NewCond(&g.wmu)
	return g
}

// Store keys, under the group's store (and its name, in case a store is
// shared by groups).
func (g *Group) key(parts ...any) string {
	k := "zipccl/gpu/" + g.cfg.Name
	for _, p := range parts {
		k += "/" + fmt.Sprint(p)
	}
	return k
}

func (g *Group) fail(code int32, op *Op, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf("zipccl: %s on cuda:%d, rank %d of group %q: ", op.Label, op.Device, g.cfg.Rank, g.cfg.Name) + fmt.Sprintf(format, args...)}
}

func (g *Group) brokenErr(op *Op) error {
	g.wmu.Lock()
	b := g.broken
	g.wmu.Unlock()
	if b != nil {
		return g.fail(CodeComm, op, "the group is unusable after an earlier failure: %v", b)
	}
	return nil
}

// setDevice binds the group to the device of its first CUDA op.
func (g *Group) setDevice(op *Op) error {
	if g.device < 0 {
		g.device = op.Device
		return nil
	}
	if op.Device != g.device {
		return g.fail(CodeInvalid, op, "this group runs on cuda:%d; its CUDA tensors must all be on that device", g.device)
	}
	return nil
}

// publishCaps publishes this rank's capabilities once.
func (g *Group) publishCaps() error {
	if g.mine != nil {
		return nil
	}
	c := g.env.caps(g.cfg.Rank, g.device)
	js, _ := json.Marshal(c)
	if err := g.cfg.Store.Set(g.key("caps", g.cfg.Rank), js); err != nil {
		return fmt.Errorf("publishing this rank's GPU capabilities: %w", err)
	}
	g.mine = &c
	if c.NCCLVersion == 0 || !c.Kernels || c.Staged != "" {
		g.log.Infof("GPU path on cuda:%d: NCCL %s, CUDA kernels %s%s", g.device,
			orText(c.NCCLVersion != 0, versionString(c.NCCLVersion), c.NCCLError),
			orText(c.Kernels, "loaded", c.KernelsErr), orText(c.Staged == "", "", ", staged path "+c.Staged))
	}
	return nil
}

func orText(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

func (g *Group) fetchCaps(ctx context.Context, rank int) (Caps, error) {
	if rank == g.cfg.Rank {
		return *g.mine, nil
	}
	js, err := g.cfg.Store.Get(ctx, g.key("caps", rank))
	if err != nil {
		return Caps{}, fmt.Errorf("waiting for rank %d's GPU capabilities (every rank publishes them at its first CUDA op): %w", rank, err)
	}
	var c Caps
	if err := json.Unmarshal(js, &c); err != nil {
		return Caps{}, fmt.Errorf("rank %d's GPU capabilities are unreadable: %w", rank, err)
	}
	return c, nil
}

// agreementFor returns what the ranks op involves can do together: the
// whole group for collectives, the two ends for point-to-point ops.
func (g *Group) agreementFor(op *Op, deadline time.Time) (agreement, error) {
	if err := g.publishCaps(); err != nil {
		return agreement{}, err
	}
	ctx, cancel := context.WithDeadline(g.cfg.Ctx, deadline)
	defer cancel()
	if op.Kind.IsP2P() && op.Root >= 0 {
		if a := g.pair[op.Root]; a != nil {
			return *a, nil
		}
		peer, err := g.fetchCaps(ctx, op.Root)
		if err != nil {
			return agreement{}, err
		}
		caps := []Caps{*g.mine, peer}
		sort.Slice(caps, func(i, j int) bool { return caps[i].Rank < caps[j].Rank })
		a := agree(caps, g.env.Topology(), g.env.host)
		g.pair[op.Root] = &a
		return a, nil
	}
	if g.coll == nil {
		caps := make([]Caps, g.cfg.Size)
		for r := range caps {
			c, err := g.fetchCaps(ctx, r)
			if err != nil {
				return agreement{}, err
			}
			caps[r] = c
		}
		a := agree(caps, g.env.Topology(), g.env.host)
		g.coll = &a
		g.profile.NoCompress = a.nvlink
		g.log.Infof("GPU path on cuda:%d: NCCL %s on every rank: %v; CUDA kernels on every rank: %v; %s",
			g.device, versionString(a.ncclVersion), a.nccl, a.kernels, a.nvlinkWhy)
	}
	return *g.coll, nil
}

var stagedWarned sync.Map

// Plan decides how op runs: through NCCL, or host-staged by the shim. The
// first call of a group publishes this rank's capabilities and waits for
// the others' (for a point-to-point op, the peer's).
func (g *Group) Plan(op *Op) (Plan, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.setDevice(op); err != nil {
		return Plan{}, err
	}
	if op.Kind == opkind.Recv && op.Root < 0 {
		p := decide(op, agreement{}, g.cfg.Mode)
		return p, nil
	}
	a, err := g.agreementFor(op, time.Now().Add(op.Timeout))
	if err != nil {
		return Plan{}, g.fail(codeFor(err), op, "%v", err)
	}
	p := decide(op, a, g.cfg.Mode)
	if p.Path == PathStaged {
		if _, seen := stagedWarned.LoadOrStore(p.Reason, true); !seen {
			g.log.Warnf("CUDA tensors take the host-staged slow path (copied to pinned host memory, run on the CPU, copied back): %s", p.Reason)
		}
	}
	return p, nil
}

func codeFor(err error) int32 {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errSettleTimeout) {
		return CodeTimeout
	}
	return CodeComm
}

// Submit enqueues op on its stream, on the calling thread (whose current
// CUDA device the caller set to op.Device), or keeps it for Flush when
// op.Defer. A nil error means OnDone will be called; an error means the op
// failed (and OnDone will not be called).
func (g *Group) Submit(op *Op) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.brokenErr(op); err != nil {
		return err
	}
	if err := g.setDevice(op); err != nil {
		return err
	}
	deadline := time.Now().Add(op.Timeout)
	a, err := g.agreementFor(op, deadline)
	if err != nil {
		return g.fail(codeFor(err), op, "%v", err)
	}
	if p := decide(op, a, g.cfg.Mode); p.Path != PathNCCL {
		return g.fail(CodeInvalid, op, "cannot run through NCCL (%s%s); the shim should have staged it", p.Reason, p.Refuse)
	}
	if op.Defer {
		g.deferred = append(g.deferred, op)
		return nil
	}
	c, err := g.commFor(op, deadline)
	if err != nil {
		return err
	}
	if d, ok := g.wantCoded(op, a, c, deadline); ok {
		op.Decision = d
		if err := g.runCoded(op, c, deadline); err != nil {
			return err
		}
	} else if err := g.enqueue([]*Op{op}, deadline); err != nil {
		return err
	}
	g.watch(op, deadline)
	return nil
}

// Flush enqueues the deferred ops (a coalescing block) in one NCCL group,
// so that matching sends and receives cannot deadlock.
func (g *Group) Flush() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	ops := g.deferred
	g.deferred = nil
	if len(ops) == 0 {
		return nil
	}
	failAll := func(err error) error {
		for _, op := range ops {
			op.OnDone(err)
		}
		return err
	}
	if err := g.brokenErr(ops[0]); err != nil {
		return failAll(err)
	}
	deadline := time.Now().Add(ops[0].Timeout)
	// Communicators first, in an order every rank shares (the group's,
	// then pairs by their lower and higher rank), so that blocking
	// creations cannot wait on each other in a cycle.
	order := append([]*Op(nil), ops...)
	sort.SliceStable(order, func(i, j int) bool { return g.commOrder(order[i]) < g.commOrder(order[j]) })
	for _, op := range order {
		if _, err := g.commFor(op, deadline); err != nil {
			return failAll(err)
		}
	}
	if err := g.enqueue(ops, deadline); err != nil {
		return failAll(err)
	}
	for _, op := range ops {
		g.watch(op, deadline)
	}
	return nil
}

func (g *Group) commOrder(op *Op) int {
	if !op.Kind.IsP2P() {
		return -1
	}
	lo, hi := min(g.cfg.Rank, op.Root), max(g.cfg.Rank, op.Root)
	return lo*g.cfg.Size + hi
}

// commFor returns op's communicator, creating it on first use: the group's
// for collectives, a two-rank one per pair for point-to-point ops (as
// ProcessGroupNCCL does, so that a send does not need every rank).
func (g *Group) commFor(op *Op, deadline time.Time) (ncclComm, error) {
	if !op.Kind.IsP2P() {
		if g.comm == nil {
			c, err := g.initComm(op, g.key("nccl", "coll"), g.cfg.Size, g.cfg.Rank, deadline)
			if err != nil {
				return nil, g.initFailed(err)
			}
			g.comm = c
		}
		return g.comm, nil
	}
	if c := g.pairs[op.Root]; c != nil {
		return c, nil
	}
	lo, hi := min(g.cfg.Rank, op.Root), max(g.cfg.Rank, op.Root)
	me := 0
	if g.cfg.Rank == hi {
		me = 1
	}
	c, err := g.initComm(op, g.key("nccl", "p2p", strconv.Itoa(lo)+"-"+strconv.Itoa(hi)), 2, me, deadline)
	if err != nil {
		return nil, g.initFailed(err)
	}
	g.pairs[op.Root] = c
	return c, nil
}

// initFailed makes a failed communicator setup final: a retry would reuse
// its store key, where the ranks could read unique ids of different tries
// and wait on each other until the timeout. The group stays unusable, as
// ProcessGroupNCCL's does after a failed init.
func (g *Group) initFailed(err error) error {
	g.breakDevice(err, nil)
	return err
}

// peerIndex is op's peer in its communicator.
func (g *Group) peerIndex(op *Op) int {
	if g.cfg.Rank < op.Root {
		return 1
	}
	return 0
}

// initComm creates an NCCL communicator of n ranks, this one being me: the
// rank 0 of it draws the unique id and publishes it under key; the others
// fetch it.
func (g *Group) initComm(op *Op, key string, n, me int, deadline time.Time) (ncclComm, error) {
	lib, err := g.env.NCCL()
	if err != nil {
		return nil, g.fail(CodeComm, op, "%v", err)
	}
	id, err := exchangeID(g.cfg.Ctx, g.cfg.Store, lib, key, me, deadline)
	if err != nil {
		return nil, g.fail(codeFor(err), op, "setting up the NCCL communicator: %v", err)
	}
	start := time.Now()
	c, err := lib.InitRank(n, id, me)
	if err != nil {
		return nil, g.fail(CodeComm, op, "creating the NCCL communicator: %v", err)
	}
	if err := c.Settle(deadline); err != nil {
		c.Abort()
		if errors.Is(err, errSettleTimeout) {
			return nil, g.fail(CodeTimeout, op, "creating the NCCL communicator (%d ranks) timed out after %v; was it aborted elsewhere, or does a rank never reach its first CUDA op?", n, time.Since(start).Round(time.Millisecond))
		}
		return nil, g.fail(CodeComm, op, "creating the NCCL communicator: %v", err)
	}
	g.cmu.Lock()
	g.comms = append(g.comms, c)
	g.cmu.Unlock()
	g.log.Infof("NCCL communicator %s: %d ranks on cuda:%d, created in %v", key, n, g.device, time.Since(start).Round(time.Millisecond))
	return c, nil
}

// exchangeID is the unique-id exchange through the store: rank 0 of the
// communicator calls ncclGetUniqueId and publishes it; the others wait for
// it (until deadline).
func exchangeID(parent context.Context, store rendezvous.Store, lib ncclLib, key string, me int, deadline time.Time) (UniqueID, error) {
	var id UniqueID
	if me == 0 {
		id, err := lib.UniqueID()
		if err != nil {
			return id, err
		}
		if err := store.Set(key, id[:]); err != nil {
			return id, fmt.Errorf("publishing the NCCL unique id: %w", err)
		}
		return id, nil
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	b, err := store.Get(ctx, key)
	if err != nil {
		return id, fmt.Errorf("waiting for the NCCL unique id from the communicator's first rank: %w", err)
	}
	if len(b) != len(id) {
		return id, fmt.Errorf("the NCCL unique id under %q has %d bytes, want %d", key, len(b), len(id))
	}
	copy(id[:], b)
	return id, nil
}

// prepared is the per-op state enqueue needs: its NCCL types and, for
// PREMUL_SUM, the op it created.
type prepared struct {
	op     *Op
	comm   ncclComm
	dt     ncclDataType
	redop  ncclRedOp
	premul bool
}

func premulScalar(dt dtype.DType, f float64) []byte {
	switch dt {
	case dtype.Float64:
		return binary.LittleEndian.AppendUint64(nil, math.Float64bits(f))
	case dtype.Float32:
		return binary.LittleEndian.AppendUint32(nil, math.Float32bits(float32(f)))
	case dtype.Float16:
		return binary.LittleEndian.AppendUint16(nil, dtype.F32ToF16(float32(f)))
	case dtype.BFloat16:
		return binary.LittleEndian.AppendUint16(nil, dtype.F32ToBF16(float32(f)))
	}
	return nil
}

// enqueue issues ops (uncoded) and waits until NCCL has put them on their
// streams. Several ops, or one made of several NCCL calls, go in one NCCL
// group.
func (g *Group) enqueue(ops []*Op, deadline time.Time) (err error) {
	lib, err := g.env.NCCL()
	if err != nil {
		return g.fail(CodeComm, ops[0], "%v", err)
	}
	preps := make([]*prepared, len(ops))
	defer func() {
		for _, p := range preps {
			if p != nil && p.premul {
				p.comm.DestroyOp(p.redop)
			}
		}
	}()
	grouped := len(ops) > 1
	for i, op := range ops {
		c, err := g.commFor(op, deadline)
		if err != nil {
			return err
		}
		p := &prepared{op: op, comm: c, dt: ncclUint8}
		if op.Kind.IsReduction() {
			var why string
			p.dt, p.redop, p.premul, why = ncclReduction(op.DType, op.ReduceOp, lib.Version())
			if why != "" {
				return g.fail(CodeInvalid, op, "%s", why)
			}
			if p.premul {
				r, err := c.PreMulSum(premulScalar(op.DType, op.PreMul), p.dt)
				if err != nil {
					return g.breakOn(op, err)
				}
				p.redop = r
			}
		}
		preps[i] = p
		grouped = grouped || g.calls(op) > 1
	}
	if grouped {
		if err := lib.GroupStart(); err != nil {
			return g.breakOn(ops[0], err)
		}
	}
	var first error
	var culprit *Op
	for _, p := range preps {
		if err := g.issue(p); err != nil && first == nil {
			first, culprit = err, p.op
		}
	}
	if grouped {
		if err := lib.GroupEnd(); err != nil && first == nil {
			first, culprit = err, ops[0]
		}
	}
	if first != nil {
		return g.breakOn(culprit, first)
	}
	settled := map[ncclComm]bool{}
	for _, p := range preps {
		if settled[p.comm] {
			continue
		}
		settled[p.comm] = true
		if err := p.comm.Settle(deadline); err != nil {
			return g.breakOn(p.op, err)
		}
	}
	return nil
}

// breakOn turns an NCCL failure while enqueueing into op's error, and makes
// the group unusable (the communicators' state is unknown).
func (g *Group) breakOn(op *Op, err error) error {
	e := g.fail(codeFor(err), op, "%v", err)
	g.breakDevice(fmt.Errorf("%s on rank %d failed: %v", op.Label, g.cfg.Rank, err), nil)
	return e
}

// contiguous reports whether bufs lie back to back, each of n bytes.
func contiguous(bufs []Buf, n int) bool {
	for i, b := range bufs {
		if b.Bytes != n || (n > 0 && b.Ptr != bufs[0].Ptr+uintptr(i*n)) {
			return false
		}
	}
	return true
}

// calls is how many NCCL calls issue makes for op.
func (g *Group) calls(op *Op) int {
	switch op.Kind {
	case opkind.AllGather:
		if contiguous(op.Out, op.In[0].Bytes) {
			return 1
		}
		return g.cfg.Size
	case opkind.ReduceScatter:
		if contiguous(op.In, op.Out[0].Bytes) {
			return 1
		}
		return g.cfg.Size
	case opkind.AllToAll, opkind.Gather, opkind.Scatter:
		return 2 * g.cfg.Size
	}
	return 1
}

// issue makes op's NCCL calls (inside a group when there are several).
func (g *Group) issue(p *prepared) error {
	op, c := p.op, p.comm
	st := op.Stream
	me, n := g.cfg.Rank, g.cfg.Size
	es := max(op.DType.Size(), 1)
	switch op.Kind {
	case opkind.AllReduce:
		return c.AllReduce(op.In[0].Ptr, op.Out[0].Ptr, op.In[0].Bytes/es, p.dt, p.redop, st)
	case opkind.Broadcast:
		return c.Broadcast(op.In[0].Ptr, op.Out[0].Ptr, op.In[0].Bytes, ncclUint8, op.Root, st)
	case opkind.Reduce:
		return c.Reduce(op.In[0].Ptr, op.Out[0].Ptr, op.In[0].Bytes/es, p.dt, p.redop, op.Root, st)
	case opkind.AllGather:
		if contiguous(op.Out, op.In[0].Bytes) {
			if op.In[0].Bytes == 0 {
				return nil
			}
			return c.AllGather(op.In[0].Ptr, op.Out[0].Ptr, op.In[0].Bytes, ncclUint8, st)
		}
		// Tensors of their own (or of different sizes): one broadcast
		// per root.
		for r := 0; r < n; r++ {
			src := op.Out[r].Ptr
			if r == me {
				src = op.In[0].Ptr
			}
			if op.Out[r].Bytes == 0 {
				continue
			}
			if err := c.Broadcast(src, op.Out[r].Ptr, op.Out[r].Bytes, ncclUint8, r, st); err != nil {
				return err
			}
		}
		return nil
	case opkind.ReduceScatter:
		count := op.Out[0].Bytes / es
		if contiguous(op.In, op.Out[0].Bytes) {
			return c.ReduceScatter(op.In[0].Ptr, op.Out[0].Ptr, count, p.dt, p.redop, st)
		}
		for r := 0; r < n; r++ {
			if err := c.Reduce(op.In[r].Ptr, op.Out[0].Ptr, count, p.dt, p.redop, r, st); err != nil {
				return err
			}
		}
		return nil
	case opkind.AllToAll:
		for r := 0; r < n; r++ {
			if op.In[r].Bytes > 0 {
				if err := c.Send(op.In[r].Ptr, op.In[r].Bytes, ncclUint8, r, st); err != nil {
					return err
				}
			}
			if op.Out[r].Bytes > 0 {
				if err := c.Recv(op.Out[r].Ptr, op.Out[r].Bytes, ncclUint8, r, st); err != nil {
					return err
				}
			}
		}
		return nil
	case opkind.Gather:
		if op.In[0].Bytes > 0 {
			if err := c.Send(op.In[0].Ptr, op.In[0].Bytes, ncclUint8, op.Root, st); err != nil {
				return err
			}
		}
		if me == op.Root {
			for r := 0; r < n; r++ {
				if op.Out[r].Bytes > 0 {
					if err := c.Recv(op.Out[r].Ptr, op.Out[r].Bytes, ncclUint8, r, st); err != nil {
						return err
					}
				}
			}
		}
		return nil
	case opkind.Scatter:
		if me == op.Root {
			for r := 0; r < n; r++ {
				if op.In[r].Bytes > 0 {
					if err := c.Send(op.In[r].Ptr, op.In[r].Bytes, ncclUint8, r, st); err != nil {
						return err
					}
				}
			}
		}
		if op.Out[0].Bytes > 0 {
			return c.Recv(op.Out[0].Ptr, op.Out[0].Bytes, ncclUint8, op.Root, st)
		}
		return nil
	case opkind.Send:
		if op.In[0].Bytes == 0 {
			return nil
		}
		return c.Send(op.In[0].Ptr, op.In[0].Bytes, ncclUint8, g.peerIndex(op), st)
	case opkind.Recv:
		if op.Out[0].Bytes == 0 {
			return nil
		}
		return c.Recv(op.Out[0].Ptr, op.Out[0].Bytes, ncclUint8, g.peerIndex(op), st)
	}
	return fmt.Errorf("no NCCL mapping for %v", op.Kind)
}

// ---------------------------------------------------------------------------
// Completion: the watcher.

const (
	minPause   = 20 * time.Microsecond
	maxPause   = time.Millisecond
	asyncEvery = 10 * time.Millisecond
)

// watch hands an enqueued op to the watcher, which completes it when its
// end event completes.
func (g *Group) watch(op *Op, deadline time.Time) {
	g.wmu.Lock()
	g.queues[op.Stream] = append(g.queues[op.Stream], &flight{op: op, deadline: deadline})
	g.nflight++
	if !g.watching {
		g.watching = true
		go g.watchLoop()
	}
	g.wcond.Signal()
	g.wmu.Unlock()
}

func (g *Group) watchLoop() {
	pause := minPause
	lastAsync := time.Now()
	query := g.env.eventQuery()
	for {
		g.wmu.Lock()
		for g.nflight == 0 && !g.closed {
			g.wcond.Wait()
		}
		if g.nflight == 0 {
			g.watching = false
			g.wmu.Unlock()
			return
		}
		var heads []*flight
		var all []*flight
		for _, q := range g.queues {
			if len(q) > 0 {
				heads = append(heads, q[0])
			}
			all = append(all, q...)
		}
		g.wmu.Unlock()

		progress := false
		for _, f := range heads {
			done, err := true, error(nil)
			if query != nil {
				done, err = query(f.op.Done)
			}
			if err != nil {
				g.breakDevice(fmt.Errorf("%s on rank %d: querying its CUDA event failed: %v", f.op.Label, g.cfg.Rank, err), f)
				progress = true
				break
			}
			if done && g.pop(f) {
				f.op.OnDone(nil)
				progress = true
			}
		}
		if progress {
			pause = minPause
			continue
		}
		if err := g.cfg.Ctx.Err(); err != nil {
			g.breakDevice(fmt.Errorf("%v", context.Cause(g.cfg.Ctx)), nil)
			continue
		}
		now := time.Now()
		for _, f := range all {
			if now.After(f.deadline) {
				g.breakDevice(errTimeout{f: f, rank: g.cfg.Rank, after: f.op.Timeout}, f)
				progress = true
				break
			}
		}
		if progress {
			continue
		}
		if now.Sub(lastAsync) >= asyncEvery {
			lastAsync = now
			if err := g.asyncError(); err != nil {
				g.breakDevice(fmt.Errorf("NCCL reported an asynchronous error on rank %d: %v", g.cfg.Rank, err), nil)
				continue
			}
		}
		time.Sleep(pause)
		pause = min(2*pause, maxPause)
	}
}

type errTimeout struct {
	f     *flight
	rank  int
	after time.Duration
}

func (e errTimeout) Error() string {
	return fmt.Sprintf("%s timed out on rank %d after %v", e.f.op.Label, e.rank, e.after)
}

func (g *Group) asyncError() error {
	g.cmu.Lock()
	comms := append([]ncclComm(nil), g.comms...)
	g.cmu.Unlock()
	for _, c := range comms {
		if err := c.AsyncError(); err != nil {
			return err
		}
	}
	return nil
}

// pop removes f, the head of its stream's queue; false if it is gone
// already (failed by breakDevice meanwhile).
func (g *Group) pop(f *flight) bool {
	g.wmu.Lock()
	defer g.wmu.Unlock()
	q := g.queues[f.op.Stream]
	if len(q) == 0 || q[0] != f {
		return false
	}
	g.queues[f.op.Stream] = q[1:]
	g.nflight--
	return true
}

// breakDevice makes the group unusable: it aborts every NCCL communicator
// (which ends kernels stuck waiting for a peer) and fails every op in
// flight. culprit, when known, is the op that timed out or failed.
func (g *Group) breakDevice(reason error, culprit *flight) {
	g.wmu.Lock()
	first := g.broken == nil
	if first {
		g.broken = reason
	}
	broken := g.broken
	var flights []*flight
	for s, q := range g.queues {
		flights = append(flights, q...)
		delete(g.queues, s)
	}
	g.nflight = 0
	g.wmu.Unlock()

	g.abortComms()
	for _, f := range flights {
		switch {
		case f == culprit:
			if te, ok := reason.(errTimeout); ok {
				f.op.OnDone(g.fail(CodeTimeout, f.op, "timed out after %v: its device work did not finish (the NCCL communicators were aborted)", te.after))
			} else {
				f.op.OnDone(g.fail(CodeComm, f.op, "%v (the NCCL communicators were aborted)", reason))
			}
		default:
			f.op.OnDone(g.fail(CodeComm, f.op, "failed because the group broke: %v", broken))
		}
	}
	if first {
		g.log.Warnf("GPU path broken: %v", broken)
		if g.cfg.OnBroken != nil {
			g.cfg.OnBroken(broken)
		}
	}
}

func (g *Group) abortComms() {
	g.cmu.Lock()
	comms := g.comms
	g.comms = nil
	g.cmu.Unlock()
	for _, c := range comms {
		if err := c.Abort(); err != nil {
			g.log.Infof("ncclCommAbort: %v", err)
		}
	}
}

// Abort fails every op in flight and aborts the NCCL communicators.
func (g *Group) Abort(reason string) {
	g.breakDevice(errors.New(reason), nil)
}

// Close releases the communicators (after the ops in flight, which the
// caller waited for) and the scratch memory.
func (g *Group) Close() {
	g.wmu.Lock()
	g.closed = true
	pending := g.nflight
	broken := g.broken
	g.wcond.Broadcast()
	g.wmu.Unlock()
	if pending > 0 {
		g.breakDevice(errors.New("communicator shut down with device ops pending"), nil)
		broken = errors.New("closed")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cmu.Lock()
	comms := g.comms
	g.comms = nil
	g.cmu.Unlock()
	for _, c := range comms {
		var err error
		if broken != nil {
			err = c.Abort()
		} else {
			err = c.Destroy()
		}
		if err != nil {
			g.log.Infof("releasing an NCCL communicator: %v", err)
		}
	}
	g.freeScratch()
}

// Device is the CUDA device the group runs on (-1 before its first op).
func (g *Group) Device() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.device
}
