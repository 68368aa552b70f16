package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/zipccl/zipccl/backend/collective"
	"github.com/zipccl/zipccl/backend/dtype"
	"github.com/zipccl/zipccl/backend/gpu"
	"github.com/zipccl/zipccl/backend/lossy"
	"github.com/zipccl/zipccl/backend/rendezvous"
	"github.com/zipccl/zipccl/backend/switcher"
	"github.com/zipccl/zipccl/backend/transport"
	"github.com/zipccl/zipccl/backend/zcoll"
	"github.com/zipccl/zipccl/backend/zlog"
)

// Config describes one rank of a group.
type Config struct {
	Rank, Size int
	Name       string // unique per group within the job
	Timeout    time.Duration
	Store      rendezvous.Store
	Options    map[string]string
	// Complete receives every accepted op's outcome exactly once, after
	// the engine has stopped touching the op's buffers.
	Complete func(ticket uint64, source int, err error)
	// Endpoint overrides the process's shared listener (tests).
	Endpoint *transport.Endpoint
	// GPU overrides the process's GPU environment (tests).
	GPU *gpu.Env
	// HostID overrides this process's host identity (tests; package
	// hosts).
	HostID string
	// AuthKey is the pre-shared key (tests); nil: the process's
	// (ZIPCCL_AUTH_KEY or ZIPCCL_AUTH_KEY_FILE), if any.
	AuthKey []byte
}

// Comm is one rank's communicator.
type Comm struct {
	cfg     Config
	log     *zlog.Logger
	policy  atomic.Pointer[lossy.Policy] // the lossy policy ops take when submitted
	mesh    *transport.Mesh
	pool    *collective.Pool
	timeout atomic.Int64 // nanoseconds

	ctx    context.Context // cancelled when the group breaks or closes
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*task // collectives waiting for the executor
	seq     uint64  // next collective sequence number
	closing bool
	broken  error
	active  sync.WaitGroup // accepted ops not yet completed

	sendQ map[int]*sendQueue // per-destination FIFO of sends

	z      compression                 // touched by the executor only
	shared atomic.Pointer[compression] // a copy of z for point-to-point ops
	fb     switcher.Feedback           // executor only: measured times
	last   lastCall                    // executor only: the previous collective
	// executor only: the agreed largest payload of the last all_to_all of
	// each dtype, which the next one is decided on (sizeOf)
	a2aSize map[dtype.DType]int
	stats   stats
	dev     device        // the GPU side (device.go), set up at the first CUDA op
	gpuPath string        // the group option gpu_path: nccl, coded, staged, or "" (ZIPCCL_GPU_PATH)
	monSeq  atomic.Uint64 // monitored barriers so far (their message keys)
	layout  layout        // the group's hosts (layout.go)
	flat    bool          // the group option hierarchy=flat (layout.go)
	hierAll bool          // hierarchy=all: all_to_all, and on unequal hosts reduce_scatter and all_gather, hierarchical too (layout.go)
}

type task struct {
	op       *Op
	seq      uint64
	start    time.Time
	wire     atomic.Int64 // payload bytes this rank sent for the op
	uncoded  atomic.Int64 // what they stand for uncoded (0: the same as wire)
	codecNs  atomic.Int64 // time spent coding and decoding
	decision switcher.Decision
	keyed    bool         // the switcher's feedback times this call
	key      switcher.Key // under this key
	dev      *devState    // a coded-path device op, once its inputs are ready
	gpuCoded bool         // its payload was coded on the GPU
	hosts    zcoll.Hosts  // the layout it runs hierarchically on (nil: flat)
}

// New creates the communicator. It publishes this rank's address (and, on
// rank 0, the group secret) through the store and connects nothing.
func New(cfg Config) (*Comm, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, invalidf("invalid rank %d for group size %d", cfg.Rank, cfg.Size)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Minute
	}
	c := &Comm{cfg: cfg, log: zlog.New(cfg.Rank, cfg.Name), pool: collective.NewPool(), sendQ: map[int]*sendQueue{}}
	c.cond = sync.NewCond(&c.mu)
	c.timeout.Store(int64(cfg.Timeout))
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.stats.init()
	var err error
	if c.z, err = configureCompression(cfg.Options); err != nil {
		return nil, &Error{Code: CodeInvalid, Msg: err.Error()}
	}
	if c.gpuPath, err = gpu.ParsePath(cfg.Options["gpu_path"]); err != nil {
		return nil, &Error{Code: CodeInvalid, Msg: err.Error()}
	}
	if c.flat, c.hierAll, err = hierarchyOption(cfg.Options); err != nil {
		return nil, &Error{Code: CodeInvalid, Msg: err.Error()}
	}
	if err = c.lossyOption(cfg.Options); err != nil {
		return nil, &Error{Code: CodeInvalid, Msg: err.Error()}
	}
	encrypt, err := encryption(cfg.Options)
	if err == nil && encrypt {
		c.gpuPath, err = encryptedGPUPath(c.gpuPath)
	}
	if err != nil {
		return nil, &Error{Code: CodeInvalid, Msg: err.Error()}
	}
	c.publish()

	if cfg.Size > 1 {
		key := cfg.AuthKey
		if key == nil {
			if key, err = transport.ProcessAuthKey(); err != nil {
				return nil, &Error{Code: CodeInvalid, Msg: err.Error()}
			}
		}
		ep := cfg.Endpoint
		if ep == nil {
			if ep, err = transport.Shared(); err != nil {
				return nil, err
			}
		}
		if cfg.Rank == 0 {
			if _, err := rendezvous.PublishSecret(cfg.Store); err != nil {
				return nil, err
			}
		}
		m, err := transport.NewMesh(ep, transport.Config{
			Name: cfg.Name, Rank: cfg.Rank, Size: cfg.Size,
			Secret:      func(ctx context.Context) ([]byte, error) { return rendezvous.FetchSecret(ctx, cfg.Store) },
			PeerAddr:    func(ctx context.Context, p int) (string, error) { return rendezvous.FetchAddr(ctx, cfg.Store, p) },
			OnPeerLost:  c.peerLost,
			OnAbort:     c.peerAborted,
			DialTimeout: c.Timeout,
			Log:         c.log,
			AuthKey:     key,
			Encrypt:     encrypt,
		})
		if err != nil {
			return nil, err
		}
		err = rendezvous.PublishAddr(cfg.Store, cfg.Rank, ep.Addr())
		if err == nil {
			err = rendezvous.PublishHost(cfg.Store, cfg.Rank, cfg.hostID())
		}
		if err != nil {
			m.Close()
			return nil, err
		}
		c.mesh = m
	}
	go c.executor()
	c.log.Infof("communicator created: rank %d of %d, timeout %v, compression %s%s", cfg.Rank, cfg.Size, cfg.Timeout, c.z.mode, c.security())
	return c, nil
}

// Timeout is the default per-op timeout.
func (c *Comm) Timeout() time.Duration { return time.Duration(c.timeout.Load()) }

// SetTimeout changes the default per-op timeout for ops started afterwards.
func (c *Comm) SetTimeout(d time.Duration) {
	if d > 0 {
		c.timeout.Store(int64(d))
	}
}

// Rank of this communicator; Size of its group.
func (c *Comm) Rank() int { return c.cfg.Rank }

// Size of the group.
func (c *Comm) Size() int { return c.cfg.Size }

// Submit validates op and queues it. A nil error means Complete will be
// called for op.Ticket; an error means nothing was sent.
func (c *Comm) Submit(op *Op) error {
	if err := op.validate(c.cfg.Rank, c.cfg.Size); err != nil {
		return err
	}
	if err := c.applyPolicy(op); err != nil {
		return err
	}
	if op.Dev != nil && !op.Dev.Engine {
		return c.submitDevice(op)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.usableLocked(op); err != nil {
		return err
	}
	c.active.Add(1)
	t := &task{op: op, start: time.Now()}
	if !op.Kind.IsP2P() {
		t.seq = c.seq
		c.seq++
		c.queue = append(c.queue, t)
		c.cond.Signal()
		return nil
	}
	c.startP2P(t)
	return nil
}

// complete delivers an op's outcome.
func (c *Comm) complete(t *task, source int, err error) {
	c.stats.record(t.op, t.wire.Load(), t.uncoded.Load(), time.Since(t.start), time.Duration(t.codecNs.Load()), t.decision, t.gpuCoded, err)
	if err != nil {
		c.log.Infof("%s failed: %v", t.op.Kind, err)
	} else if zlog.Enabled(zlog.Trace) {
		c.log.Tracef("%s #%d done in %v (%s: %s)", t.op.Kind, t.seq, time.Since(t.start), t.decision.Label(), t.decision.Why)
	}
	if c.cfg.Complete != nil {
		c.cfg.Complete(t.op.Ticket, source, err)
	}
	c.active.Done()
}

// executor runs collectives one at a time in sequence order.
func (c *Comm) executor() {
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.closing {
			c.cond.Wait()
		}
		if len(c.queue) == 0 {
			c.mu.Unlock()
			return
		}
		t := c.queue[0]
		c.queue = c.queue[1:]
		broken := c.broken
		c.mu.Unlock()

		var err error
		if broken != nil {
			err = c.brokenOpError(t, broken)
		} else {
			err = c.runCollective(t)
		}
		if c.mesh != nil {
			c.mesh.SetCollFloor(t.seq + 1)
		}
		c.complete(t, -1, err)
	}
}

func (c *Comm) brokenOpError(t *task, cause error) error {
	return &Error{Code: CodeComm, Msg: fmt.Sprintf("zipccl: %s #%d on rank %d of group %q failed: %v", t.op.Kind, t.seq, c.cfg.Rank, c.cfg.Name, cause)}
}

// breakGroup marks the group unusable: every running op fails and every
// later one is refused. The first reason wins.
func (c *Comm) breakGroup(reason error) bool {
	c.mu.Lock()
	if c.broken != nil || c.closing {
		c.mu.Unlock()
		return false
	}
	c.broken = reason
	c.mu.Unlock()
	c.cancel(&brokenError{reason: reason.Error()})
	return true
}

// peerLost is the transport's report that a connection died.
func (c *Comm) peerLost(peer int, err error) {
	reason := fmt.Errorf("rank %d is lost (%v)", peer, errors.Unwrap(err))
	if !c.breakGroup(reason) {
		return
	}
	c.log.Warnf("%v", reason)
	msg := fmt.Sprintf("rank %d is lost (detected by rank %d: %v)", peer, c.cfg.Rank, errors.Unwrap(err))
	go func() {
		c.mesh.SendAbort(msg)
		rendezvous.ReportAbort(c.cfg.Store, msg)
	}()
}

// peerAborted is a peer's report that the group is broken.
func (c *Comm) peerAborted(peer int, reason string) {
	if c.breakGroup(fmt.Errorf("%s (reported by rank %d)", reason, peer)) {
		c.log.Warnf("rank %d reports: %s", peer, reason)
	}
}

// Abort fails every pending op and closes every connection now.
func (c *Comm) Abort(reason string) {
	if reason == "" {
		reason = "aborted"
	}
	err := fmt.Errorf("communicator aborted on rank %d: %s", c.cfg.Rank, reason)
	c.breakGroup(err)
	c.abortDevice(err.Error())
	if c.mesh != nil {
		c.mesh.SendAbort(err.Error())
		c.mesh.Abort(err)
	}
	c.shutdownExecutor()
	c.active.Wait()
	c.closeDevice()
}

// closeWait bounds how long Close waits for ops still in flight before
// aborting them.
const closeWait = 30 * time.Second

// Close waits for accepted ops to finish (at most closeWait), says goodbye
// to the peers and releases everything.
func (c *Comm) Close() {
	c.shutdownExecutor()
	done := make(chan struct{})
	go func() { c.active.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(min(closeWait, c.Timeout())):
		c.log.Warnf("closing with ops still pending; aborting them")
		c.cancel(&brokenError{reason: "communicator shut down with this op still pending"})
		<-done
	}
	c.cancel(&brokenError{reason: "communicator shut down"})
	c.closeDevice()
	if c.mesh != nil {
		c.mesh.Close()
	}
	c.log.Infof("communicator closed; %s", c.stats.summary())
}

func (c *Comm) shutdownExecutor() {
	c.mu.Lock()
	c.closing = true
	c.cond.Broadcast()
	c.mu.Unlock()
}

// encryption reads the group option "encrypt", else ZIPCCL_ENCRYPT: whether
// the group's pairs seal what they write (transport, seal.go).
func encryption(opts map[string]string) (bool, error) {
	v, ok := opts["encrypt"]
	if !ok {
		v = os.Getenv("ZIPCCL_ENCRYPT")
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "0", "false", "off", "no":
		return false, nil
	case "1", "true", "on", "yes":
		return true, nil
	}
	return false, fmt.Errorf("zipccl: encrypt=%q: want 1 or 0", v)
}

// encryptedGPUPath keeps CUDA tensors of an encrypted group on zipccl's own
// transport: NCCL's traffic is NCCL's and not encrypted, so a group that
// asked for encryption never takes that path, and one told to is refused.
func encryptedGPUPath(path string) (string, error) {
	if path == "" {
		path, _ = gpu.ParsePath(os.Getenv("ZIPCCL_GPU_PATH"))
	}
	switch path {
	case "nccl":
		return "", errors.New("zipccl: encrypt=1 with gpu_path=nccl: NCCL's own traffic is not encrypted; use gpu_path=coded or staged, or leave it unset")
	case "":
		return "coded", nil // the GPU codes where it can, else the host stages
	}
	return path, nil
}

// security describes the group's protection for the log (never the key).
func (c *Comm) security() string {
	if c.mesh == nil {
		return ""
	}
	s := ", pairs authenticated with the group secret"
	if c.mesh.HasAuthKey() {
		s += " and the pre-shared key"
	}
	if c.mesh.Encrypts() {
		s += ", encrypted (AES-256-GCM)"
	}
	return s
}
