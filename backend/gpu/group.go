package gpu

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/zipccl/zipccl/backend/opkind"
	"github.com/zipccl/zipccl/backend/quant"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/zlog"
)

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

var pathLogged sync.Map

// Plan decides how op runs: through NCCL, GPU-coded over the engine's
// transport, or host-staged by the shim. The first call of a group
// publishes this rank's capabilities and waits for the others' (for a
// point-to-point op, the peer's). Each path is logged once per process,
// with its reason: the staged one at WARN (it is the slow one).
func (g *Group) Plan(op *Op) (Plan, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.setDevice(op); err != nil {
		return Plan{}, err
	}
	if op.Kind == opkind.Recv && op.Root < 0 {
		return decide(op, agreement{}, Caps{}, g.cfg.Mode), nil
	}
	a, err := g.agreementFor(op, time.Now().Add(op.Timeout))
	if err != nil {
		return Plan{}, g.fail(codeFor(err), op, "%v", err)
	}
	p := decide(op, a, *g.mine, g.cfg.Mode)
	if _, seen := pathLogged.LoadOrStore(fmt.Sprint(p.Path, p.Reason), true); !seen {
		switch p.Path {
		case PathStaged:
			g.log.Warnf("CUDA tensors take the host-staged slow path (copied to pinned host memory, run on the CPU, copied back): %s", p.Reason)
		case PathCoded:
			g.log.Infof("CUDA tensors run GPU-coded over zipccl's transport (coded on cuda:%d where the switcher codes, frames through page-locked host memory): %s", g.device, p.Reason)
		default:
			g.log.Infof("CUDA tensors run through NCCL%s", orText(p.Reason == "", "", ": "+p.Reason))
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
	if p := decide(op, a, *g.mine, g.cfg.Mode); p.Path != PathNCCL {
		return g.fail(CodeInvalid, op, "cannot run through NCCL (%s%s); the shim should have staged it", p.Reason, p.Refuse)
	}
	if op.Lossy.Mode != quant.None {
		// It runs now, on this thread: the coalesced ops before it go first.
		if err := g.flushLocked(); err != nil {
			return err
		}
	} else if op.Defer {
		g.deferred = append(g.deferred, op)
		return nil
	}
	c, err := g.commFor(op, deadline)
	if err != nil {
		return err
	}
	if op.Lossy.Mode != quant.None {
		op.Decision = switcher.Decision{Why: fmt.Sprintf("lossy %v (the group's policy), on the GPU", op.Lossy)}
		layout := a.hosts
		if g.cfg.Flat {
			layout = nil
		}
		if err := g.runLossy(op, c, deadline, layout); err != nil {
			return err
		}
	} else if d, ok := g.wantCoded(op, a, c, deadline); ok {
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
	return g.flushLocked()
}

func (g *Group) flushLocked() error {
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
